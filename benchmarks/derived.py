"""Figures computed from measured ones: docs/scale.md's per-unit costs and its 1 TB / 10 TB estimate.

A benchmark measures on a 2-core machine; docs/scale.md extrapolates to corpora no benchmark here
can prepare. The extrapolation is arithmetic on the measured files, done here and nowhere else,
and written to ``benchmarks/results/<name>.json`` like a benchmark's results (its command, the
machine and date of the measurements it starts from, and the files it read), so the docs quote
it through markers and a re-run benchmark moves it: ``python benchmarks/figures.py --write`` runs
this first. The trade-off: an estimate, not a measurement at scale. The network and the shared
file system's throughput are not modelled, and the rates are a 2-core development machine's.

The model (``scale``), from ``lm_serial.json`` (the largest size: the tokenizer's sample at its
cap) and ``lm_driver.json`` (the driver as the corpus grows):

* parallel work: the prepare's wall time less its serial parts, on ``W`` workers, per MB of text
  (CPU-seconds per MB). ``bench_lm_serial.py``'s Amdahl counts the write as serial; its work is
  the workers' (``data/lm/publishing.py``: they place and hash the files) and the driver's own CPU
  outside the tokenizer is measured apart (``driver_in_steps``, which does not grow with the
  text), so here the write's time is counted with the parallel work, the driver's CPU as serial;
* serial: the tokenizer's training (constant past its sample), identifying the input (one read of
  it at :data:`READ_GB_PER_S`), the driver's cost per partition (``dedup``'s maps, work items
  included: what grows between the two sizes of ``bench_lm_driver.py``, per partition added), and
  the driver's CPU outside the tokenizer at the measured size;
* partitions: the package's default count (:func:`partition_count`); past its cap, the power of
  two that keeps a partition near :data:`PARTITION_BYTES` (set ``num_partitions``);
* disk: the measured peak and cache as multiples of the text.

Usage::

    python benchmarks/derived.py            # writes every derived results file
    python benchmarks/derived.py --check    # lists the derived files that differ from their inputs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from results_file import RESULTS, flatten

from lightning_order.data.engine.partitions import MAX_PARTITIONS, TARGET_PARTITION_BYTES, partition_count

#: The read rate assumed for identifying the input (GB/s): a shared file system's, not measured here.
READ_GB_PER_S = 2.0
#: The text a partition holds once the default count is capped: twice the default's target, so a
#: worker's memory stays near what the default gives at 1 TB (a partition is held whole).
PARTITION_BYTES = 2 * TARGET_PARTITION_BYTES
#: The corpora worked out (MB of text), and the worker counts.
CORPORA_MB = {"1tb": 1_000_000, "10tb": 10_000_000}
WORKERS = (100, 512)


def _num_proc(command: str) -> int:
    """The ``--num-proc`` a benchmark's recorded command ran with (2, the benchmarks' default, if none)."""
    words = command.split()
    return int(words[words.index("--num-proc") + 1]) if "--num-proc" in words else 2


def _largest_size(serial: Mapping[str, Any]) -> str:
    sizes = {key.split(".", 1)[0] for key in serial}
    return max(sizes, key=float)


def partitions_for(text_bytes: float) -> int:
    """The partitions worked out for ``text_bytes`` of text: the default, or past its cap the power
    of two nearest to ``text_bytes / PARTITION_BYTES``."""
    default = partition_count(int(text_bytes))
    if text_bytes / default <= PARTITION_BYTES:
        return default
    return 1 << round(math.log2(text_bytes / PARTITION_BYTES))


def scale(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """docs/scale.md's per-unit costs and the 1 TB / 10 TB estimate (see the module's docstring).

    Args:
        results: each input results file (command, machine, date, figures) by source name
            (``lm_serial``, ``lm_driver``).

    Returns:
        The derived figures, nested (``unit.*``, ``1tb.*``, ``10tb.*``).
    """
    serial, driver = results["lm_serial"]["figures"], results["lm_driver"]["figures"]
    size = _largest_size(serial)
    at = {key.split(".", 1)[1]: value for key, value in serial.items() if key.startswith(f"{size}.")}
    workers = _num_proc(results["lm_serial"]["command"])
    text_mb = at["text_mb"]
    driver_cpu = at["serial.driver_in_steps"]
    parallel_wall = at["wall"] - at["serial.identify"] - at["serial.train_tokenizer"] - driver_cpu
    unit = {
        "measured_mb": float(size),
        "parallel_cpu_s_per_mb": round(parallel_wall * workers / text_mb, 3),
        "tokenizer_s": at["serial.train_tokenizer"],
        "tokenizer_sample_mb": round(at["sample_bytes"] / 1e6),
        "input_over_text": round(at["input_mb"] / text_mb, 2),
        "partition_driver_ms": driver["growth.dedup_driver_ms_per_partition"],
        "driver_cpu_s": driver_cpu,
        "disk_peak_over_text": at["disk_peak_over_text"],
        "cache_over_text": at["cache_over_text"],
        "read_gb_per_s": READ_GB_PER_S,
        "default_partition_mb": round(TARGET_PARTITION_BYTES / 1e6, 1),
        "max_partitions": MAX_PARTITIONS,
    }
    found: dict[str, Any] = {"unit": unit}
    for name, mb in CORPORA_MB.items():
        text_bytes = mb * 1e6
        partitions = partitions_for(text_bytes)
        default = partition_count(int(text_bytes))
        parallel = unit["parallel_cpu_s_per_mb"] * mb
        identify = mb * unit["input_over_text"] / (READ_GB_PER_S * 1000)
        per_partition = partitions * unit["partition_driver_ms"] / 1000
        serial_s = unit["tokenizer_s"] + identify + per_partition + driver_cpu
        corpus: dict[str, Any] = {
            "partitions": partitions,
            "partition_mb": round(mb / partitions),
            "default_partitions": default,
            "default_partition_mb": round(mb / default),
            "parallel_cpu_s": round(parallel, -3),
            "input_tb": round(mb * unit["input_over_text"] / 1e6, 2),
            "identify_min": round(identify / 60, 1),
            "per_partition_min": round(per_partition / 60, 1),
            "serial_min": round(serial_s / 60, 1),
            "disk_peak_tb": round(mb * unit["disk_peak_over_text"] / 1e6, 1),
            "cache_tb": round(mb * unit["cache_over_text"] / 1e6, 1),
        }
        for n in WORKERS:
            wall = serial_s + parallel / n
            corpus[f"on_{n}"] = {
                "parallel_h": round(parallel / n / 3600, 2),
                "parallel_min": round(parallel / n / 60),
                "wall_h": round(wall / 3600, 2),
                "wall_min": round(wall / 60),
                "per_partition_share": round(per_partition / wall, 3),
                "identify_share": round(identify / wall, 3),
                "serial_share": round(serial_s / wall, 3),
                "speedup_over_1": round((serial_s + parallel) / wall),
            }
        found[name] = corpus
    return found


#: Each derived results file: its name, the results files it reads, the function that computes it.
DERIVED: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Mapping[str, Any]]], dict[str, Any]]]] = {
    "scale": (("lm_serial", "lm_driver"), scale),
}


def derive(name: str, folder: Path = RESULTS) -> dict[str, Any]:
    """The results file ``name`` as its inputs in ``folder`` give it now (not written).

    Its machine and date are its inputs' (the latest date): the arithmetic adds neither, so the
    file is the same whenever and wherever it is derived, and a check compares it exactly.
    """
    inputs, compute = DERIVED[name]
    read = {source: json.loads((folder / f"{source}.json").read_text(encoding="utf-8")) for source in inputs}
    machines = sorted({read[source]["machine"] for source in inputs})
    return {
        "command": f"python benchmarks/derived.py  # from {', '.join(f'{s}.json' for s in inputs)}",
        "inputs": {source: read[source]["command"] for source in inputs},
        "machine": "; ".join(machines),
        "date": max(read[source]["date"] for source in inputs),
        "figures": flatten(compute(read)),
    }


def write(folder: Path = RESULTS) -> list[Path]:
    """Writes every derived results file into ``folder``; returns their paths."""
    paths = []
    for name in DERIVED:
        path = folder / f"{name}.json"
        path.write_text(json.dumps(derive(name, folder), indent=2) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def stale(folder: Path = RESULTS) -> list[str]:
    """The derived results files of ``folder`` that differ from what their inputs give now."""
    found = []
    for name in DERIVED:
        path = folder / f"{name}.json"
        if not path.is_file() or json.loads(path.read_text(encoding="utf-8")) != derive(name, folder):
            found.append(f"{path.name} differs from {', '.join(DERIVED[name][0])} (python benchmarks/derived.py)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list the derived files that differ; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for line in found:
            print(line)
        return 1 if found else 0
    for path in write():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

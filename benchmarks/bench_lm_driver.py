"""Benchmark: what the LM prepare's driver does as the corpus grows (issue #35 item 2, O(partitions) on the driver).

Tiny documents (eight words of a 50 000-word vocabulary, about 50 bytes each), so millions of
them fit on a small machine; or, with ``--duplicates``, clusters of 200 near-duplicates (a
60-word document and 199 copies with one word changed each, about 90 % n-gram Jaccard to it).
Each size runs in a fresh process (``num_proc`` worker processes beside it); the driver is that
process alone (``getrusage(RUSAGE_SELF)``: its CPU seconds, user + system, and its peak resident
set; the workers are other processes). Per step, the driver's CPU seconds and its peak resident
set during the step (the kernel's high-water mark, reset before each step through
``/proc/self/clear_refs``). Every work item and every result a map sends is pickled as a process
pool pickles it, and the largest of each recorded; dedup's grouping tasks report the bytes of
the arrays they held (the largest is printed), and its connected-component rounds are counted.

The tokenizer's sample is capped (``--tokenizer-train-bytes``, 4 MB by default) so that training
the tokenizer, which is the driver's by design, costs the same at every size. ``load`` is judged:
the corpus is one Parquet file, which the workers read row group by row group (the driver plans
the items from its footer). The steps after ``build_vocab`` are other items of the issue and are
reported, not judged, here.

Usage::

    python benchmarks/bench_lm_driver.py [--docs 1000000 2000000 4000000 8000000] [--num-proc 2]
        [--duplicates] [--data-dir DIR] [--json out.json] [--stop-after STEP] [--results]

Prints one JSON line per size and a table. ``--results`` writes ``benchmarks/results/lm_driver.json``
(``lm_driver_duplicates.json`` with ``--duplicates``; keys ``<documents>.<figure>``), the figures
the docs quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from figures import command_line, write_results

#: The steps this benchmark judges: what issue #35 items 1 and 2 moved off the driver (``load``: workers read the input).
JUDGED = ("load", "clean", "dedup", "split", "build_vocab")


def write_corpus(path: Path, docs: int, duplicates: bool) -> Path:
    """``docs`` tiny documents (or clusters of 200 near-duplicates) as one Parquet file, written once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        return path
    rng = random.Random(docs)
    vocab = [f"w{i}" for i in range(50_000)]
    texts: list[str] = []
    if duplicates:
        while len(texts) < docs:
            base = rng.choices(vocab, k=60)
            texts.append(" ".join(base))
            for _ in range(min(199, docs - len(texts))):
                copy = list(base)
                copy[rng.randrange(60)] = rng.choice(vocab)
                texts.append(" ".join(copy))
    else:
        texts = [" ".join(rng.choices(vocab, k=8)) for _ in range(docs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table({"text": pa.array(texts, pa.large_string())}), tmp)
    os.replace(tmp, path)
    return path


def _peak_reset() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # not Linux, or not allowed: the high-water mark then only grows
        pass


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    return _status_mb("VmHWM:")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Stopped(Exception):
    """Raised at the step after ``--stop-after``: the prepare ends there."""


def child(
    corpus: Path, cache: Path, num_proc: int, sample_bytes: int, stop_after: str = ""
) -> dict[str, Any]:
    """One prepare in this process (up to ``stop_after``, if given), the driver measured per step."""
    from lightning_order import OrderedLMDataModule
    from lightning_order.data.engine import engines
    from lightning_order.data.engine.registry import StepRegistry
    from lightning_order.data.lm import prepare

    steps: dict[str, dict[str, float]] = {}
    meta: dict[str, Any] = {"partitions": None}
    original = StepRegistry.__getitem__

    def measured(self: StepRegistry, name: str) -> Any:
        spec = original(self, name)

        def fn(ctx: Any, state: Any) -> Any:
            if stop_after and stop_after in steps:
                raise _Stopped(name)
            _peak_reset()
            resident = _status_mb("VmRSS:")
            start, wall = _cpu(), time.perf_counter()
            try:
                out = spec.fn(ctx, state)
                meta.update(
                    partitions=(getattr(out, "params", None) or {}).get("partitions", meta["partitions"])
                )
                return out
            finally:
                steps[name] = {
                    "driver_cpu_s": round(_cpu() - start, 2),
                    "driver_peak_mb": round(_peak_mb(), 1),
                    # What the step itself added on top of what it found resident (the input that
                    # load maps stays resident through the next steps: load's, not theirs).
                    "driver_added_mb": round(_peak_mb() - resident, 1),
                    "wall_s": round(time.perf_counter() - wall, 2),
                }

        return dataclasses.replace(spec, fn=fn)

    StepRegistry.__getitem__ = measured  # type: ignore[method-assign]
    largest = {"item": 0, "result": 0, "item_task": "", "result_task": ""}
    # Dedup's grouping tasks report the bytes of the arrays they held; the rounds are counted by desc.
    grouping: dict[str, Any] = {"largest_held_bytes": 0, "held_task": "", "rounds": 0}

    class Recording(engines.LocalEngine):
        def map(self, fn: Any, items: Any, weight: Any = None, desc: str = "") -> list[Any]:
            items = list(items)
            _largest(largest, "item", fn.__name__, items)
            results = super().map(fn, items, weight, desc)
            _largest(largest, "result", fn.__name__, results)
            _held(grouping, fn.__name__, desc, results)
            return results

    prepare.make_engine = lambda name, num_proc, address=None: Recording(num_proc)  # type: ignore[assignment]
    start, wall = _cpu(), time.perf_counter()
    dm = OrderedLMDataModule(
        "parquet",
        data_files=str(corpus),
        cache_dir=str(cache),
        vocab_size=1000,
        block_size=64,
        num_proc=num_proc,
        tokenizer_train_bytes=sample_bytes,
    )
    try:
        dm.prepare_data()
    except Exception as err:  # the runner may wrap it: stopped on purpose when the marker is in the chain
        if not stop_after or "_Stopped" not in repr(err) + repr(err.__cause__) + repr(err.__context__):
            raise
    total = {"driver_cpu_s": round(_cpu() - start, 2), "wall_s": round(time.perf_counter() - wall, 2)}
    dedup = dm.ledger.latest("dedup").stats if not stop_after else {}  # a stopped prepare has no ledger
    return {
        "steps": steps,
        "total": total,
        # The highest of the steps' peaks (the kernel's own maximum is reset with each step's).
        "driver_peak_mb": max(step["driver_peak_mb"] for step in steps.values()),
        "largest": largest,
        "partitions": meta["partitions"],
        "dedup": {
            k: dedup[k]
            for k in ("exact_removed", "near_removed", "clusters", "candidate_pairs")
            if k in dedup
        },
        "grouping": grouping,
    }


def _held(grouping: dict[str, Any], task: str, desc: str, results: list[Any]) -> None:
    if desc.startswith("dedup clusters, round "):
        grouping["rounds"] = max(grouping["rounds"], int(desc.rsplit(" ", 1)[-1]))
    for result in results:
        if isinstance(result, dict) and result.get("held", 0) > grouping["largest_held_bytes"]:
            grouping["largest_held_bytes"], grouping["held_task"] = result["held"], task


def _largest(largest: dict[str, Any], kind: str, task: str, values: list[Any]) -> None:
    for value in values:
        size = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        if size > largest[kind]:
            largest[kind], largest[f"{kind}_task"] = size, task


def run(docs: int, args: argparse.Namespace) -> dict[str, Any]:
    kind = "dup200" if args.duplicates else "tiny"
    corpus = write_corpus(Path(args.data_dir) / f"{kind}-{docs}.parquet", docs, args.duplicates)
    cache = Path(tempfile.mkdtemp(prefix="bench-lm-driver-"))
    try:
        command = [sys.executable, __file__, "--child", str(corpus), str(cache), str(args.num_proc)]
        command += [str(args.tokenizer_train_bytes), args.stop_after]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        found = json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    judged = [found["steps"][s] for s in JUDGED if s in found["steps"]]
    found.update(
        docs=docs,
        corpus=kind,
        mb=round(corpus.stat().st_size / 1e6, 1),
        judged_driver_cpu_s=round(sum(s["driver_cpu_s"] for s in judged), 2),
        judged_driver_peak_mb=max(s["driver_peak_mb"] for s in judged),
        judged_driver_added_mb=max(s.get("driver_added_mb", float("nan")) for s in judged),
    )
    return found


def growth(first: dict[str, Any], last: dict[str, Any]) -> dict[str, float]:
    """How the driver's judged cost grew from the smallest corpus to the largest: ratios, and
    ``dedup``'s driver CPU per partition added (it grows per partition, not per document)."""
    added = last["partitions"] - first["partitions"]
    dedup = [r["steps"].get("dedup", {}).get("driver_cpu_s") for r in (first, last)]
    found = {
        "judged_driver_cpu": round(last["judged_driver_cpu_s"] / first["judged_driver_cpu_s"], 2),
        "judged_driver_peak": round(last["judged_driver_peak_mb"] / first["judged_driver_peak_mb"], 2),
    }
    if added and None not in dedup:
        found["dedup_driver_ms_per_partition"] = round((dedup[1] - dedup[0]) / added * 1000)
    return found


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        corpus, cache, num_proc, sample, stop_after = sys.argv[2:7]
        print(json.dumps(child(Path(corpus), Path(cache), int(num_proc), int(sample), stop_after)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 2_000_000, 4_000_000, 8_000_000])
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--duplicates", action="store_true", help="clusters of 200 near-duplicates")
    parser.add_argument("--tokenizer-train-bytes", type=int, default=4 << 20)
    parser.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "bench-lm-driver"))
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--stop-after", default="", help="end each prepare after this step (e.g. clean)")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/lm_driver.json (lm_driver_duplicates.json), the figures the docs quote",
    )
    args = parser.parse_args()
    results = []
    for docs in args.docs:
        found = run(docs, args)
        print(json.dumps(found), flush=True)
        results.append(found)
    print(
        f"\n{'docs':>9} {'MB':>6} {'parts':>5} | {'judged steps: driver CPU s':>26} {'peak MB':>8} {'added MB':>8} | "
        f"{'whole prepare: driver CPU s':>27} {'peak MB':>8} {'wall s':>7} | largest item, result (B)"
    )
    for r in results:
        print(
            f"{r['docs']:>9} {r['mb']:>6} {r['partitions']:>5} | {r['judged_driver_cpu_s']:>26} "
            f"{r['judged_driver_peak_mb']:>8} {r['judged_driver_added_mb']:>8} | {r['total']['driver_cpu_s']:>27} "
            f"{r['driver_peak_mb']:>8} "
            f"{r['total']['wall_s']:>7} | {r['largest']['item']} ({r['largest']['item_task']}), "
            f"{r['largest']['result']} ({r['largest']['result_task']})"
        )
        if "grouping" in r:
            g = r["grouping"]
            print(
                f"{'':>9} dedup: driver CPU {r['steps']['dedup']['driver_cpu_s']} s, "
                f"{g['rounds']} component rounds, largest array held by a grouping task "
                f"{g['largest_held_bytes']} B ({g['held_task']})"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.results:
        name = "lm_driver_duplicates" if args.duplicates else "lm_driver"
        figures: dict[str, Any] = {str(r["docs"]): r for r in results}
        if len(results) > 1:
            figures["growth"] = growth(results[0], results[-1])
        print(f"wrote {write_results(name, figures, command_line())}")


if __name__ == "__main__":
    main()

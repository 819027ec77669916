"""Benchmark: the serial (driver-only) share of the LM prepare's wall time, and what it implies for N workers.

Issue #35 asks for the share of the wall time that no number of workers shortens, at 40 MB and
200 MB with the default tokenizer sample (``tokenizer_train_bytes``, 128 MB). The serial parts,
each measured, not inferred:

* ``identify``: hashing the input files for the cache key (the DataModule's construction);
* ``train_tokenizer``: training the BPE on the sample (``build_vocab``'s ``train_seconds``; the
  sample itself is chosen on the workers);
* ``write``: what the preparation does after its last step and outside the steps (placing the
  cache's files, the manifest, the publish): the prepare's wall time less its steps';
* ``driver_in_steps``: the driver's own CPU seconds during the preparation, less the tokenizer
  training's (``train_cpu_seconds``) (an upper bound of the time the workers wait for it:
  submitting items, merging small results; it overlaps ``write``, so the sum is an upper bound).

Everything else is the workers' (parallel) time. Also recorded: the most disk the cache folder
(scratch and published cache) took during the preparation, sampled every half second, against
the text's size. With ``S`` serial seconds and ``P`` parallel
seconds on ``W`` workers, ``N`` workers take ``S + P * W / N`` (Amdahl); the speed-up of N
workers over one is ``(S + P * W) / (S + P * W / N)``. The corpus is the varied standard-library
documentation of ``bench_lm_prepare.py`` (Parquet), each size prepared in a fresh process.

Usage::

    python benchmarks/bench_lm_serial.py [--sizes 40 200] [--num-proc 2] [--workers 100] [--json out.json] [--results]

``--results`` writes ``benchmarks/results/lm_serial.json`` (keys ``<size>.<figure>``: ``40.wall``,
``200.serial.train_tokenizer``), the figures the docs quote.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from bench_lm_prepare import BLOCK_SIZE, VOCAB_SIZE, build_corpus
from figures import command_line, write_results


def _driver_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _folder_bytes(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512  # what the disk holds
    return total


class _ScratchPeak(threading.Thread):
    """The most bytes ``folder`` held on disk, sampled every half second (the scratch and the cache)."""

    def __init__(self, folder: str) -> None:
        super().__init__(daemon=True)
        self.folder, self.peak, self.done = folder, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.peak = max(self.peak, _folder_bytes(self.folder))


def _measure(data: str, cache: str, num_proc: int) -> dict:
    os.environ["LIGHTNING_ORDER_PROGRESS"] = "0"
    from lightning_order import OrderedLMDataModule

    start = time.perf_counter()
    dm = OrderedLMDataModule(
        "parquet",
        data_files=data,
        vocab_size=VOCAB_SIZE,
        block_size=BLOCK_SIZE,
        cache_dir=cache,
        num_proc=num_proc,
    )
    identify = time.perf_counter() - start
    sampler = _ScratchPeak(cache)
    sampler.start()
    cpu, begun = _driver_cpu(), time.perf_counter()
    dm.prepare_data()
    prepare_wall, driver_cpu = time.perf_counter() - begun, _driver_cpu() - cpu
    sampler.done.set()
    sampler.join()
    steps = {r.step: float(r.stats.get("seconds", 0.0)) for r in dm.ledger.records}
    vocab = dm.ledger.latest("build_vocab").stats
    train = float(vocab.get("train_seconds", 0.0))
    serial = {
        "identify": identify,
        "train_tokenizer": train,
        "write": max(prepare_wall - sum(steps.values()), 0.0),
        # tokenizers trains in threads of this process: their CPU is the training's, counted above
        "driver_in_steps": max(driver_cpu - float(vocab.get("train_cpu_seconds", 0.0)), 0.0),
    }
    return {
        "wall": identify + prepare_wall,
        "steps": {k: round(v, 2) for k, v in steps.items()},
        "serial": {k: round(v, 2) for k, v in serial.items()},
        "sample_bytes": vocab.get("sample_bytes"),
        "input_mb": round(os.path.getsize(data) / 1e6, 1),
        "text_mb": round(dm.ledger.latest("load").stats["bytes"] / 1e6, 1),
        "disk_peak_mb": round(sampler.peak / 1e6, 1),  # scratch and cache together, at their largest
        "cache_mb": round(_folder_bytes(cache) / 1e6, 1),
        "partitions": dm.ledger.latest("load").params["partitions"],
    }


def implied(result: dict, workers: int, measured_workers: int) -> dict:
    """Amdahl from a measurement on ``measured_workers``: the time and speed-up on ``workers``."""
    serial = sum(result["serial"].values())
    parallel = max(result["wall"] - serial, 0.0)
    one = serial + parallel * measured_workers
    many = serial + parallel * measured_workers / workers
    return {
        "serial_seconds": round(serial, 2),
        "serial_share": round(serial / result["wall"], 3),
        f"wall_on_{workers}": round(many, 2),
        f"speedup_{workers}_over_1": round(one / many, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[40, 200], help="corpus sizes, MB of text")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--workers", type=int, default=100, help="the worker count to extrapolate to")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "lo-bench-lm")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/lm_serial.json, the figures the docs quote"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_measure(args.worker, args.cache, args.num_proc)))
        return
    rows = []
    for size in args.sizes:
        corpus = build_corpus(args.data_dir, size)
        cache = Path(tempfile.mkdtemp(prefix="lo-serial-"))
        try:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(corpus),
                    "--cache",
                    str(cache),
                    "--num-proc",
                    str(args.num_proc),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        result = json.loads(out.strip().splitlines()[-1])
        result.update(size_mb=size, **implied(result, args.workers, args.num_proc))
        # the disk the preparation needs, as a multiple of the text it prepares
        result.update(
            disk_peak_over_text=round(result["disk_peak_mb"] / result["text_mb"], 1),
            cache_over_text=round(result["cache_mb"] / result["text_mb"], 1),
        )
        print(json.dumps(result), flush=True)
        rows.append(result)
    print(
        f"\n| MB | wall s | serial s (identify / train tokenizer / write / driver in steps) | share | {args.workers} workers |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        parts = " / ".join(
            f"{r['serial'][k]:.1f}" for k in ("identify", "train_tokenizer", "write", "driver_in_steps")
        )
        print(
            f"| {r['size_mb']:g} | {r['wall']:.1f} | {r['serial_seconds']:.1f} ({parts}) | {r['serial_share']:.0%} | "
            f"{r[f'wall_on_{args.workers}']:.1f} s, {r[f'speedup_{args.workers}_over_1']}x over 1 |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        figures = {f"{r['size_mb']:g}": r for r in rows}
        print(f"wrote {write_results('lm_serial', figures, command_line())}")


if __name__ == "__main__":
    main()

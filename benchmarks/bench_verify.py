"""Benchmark: what verifying a prepared cache costs (xxh3 of every file against the manifest).

Writes ``--mb`` MB of random bytes as ``--files`` files plus a manifest listing them
(:func:`~lightning_order.data.engine.storage.file_records`), then times, best of ``--repeat``:
a plain read of every file (the floor: the bytes must come from disk or the page cache anyway)
and :func:`~lightning_order.data.engine.storage.verify_files` (read + xxh3 + compare). Both are timed
with the files in the page cache (a warm cache, the common case: the run that just prepared or
read the data); a cold read is bounded by the disk, hashing or not.

Usage::

    python benchmarks/bench_verify.py --mb 300 --files 4 [--results]   # --results: benchmarks/results/verify.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from figures import command_line, write_results

from lightning_order.data.engine.storage import file_records, verify_files


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/verify.json, the figures the docs quote"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        block = os.urandom(1 << 20)
        per_file = args.mb // args.files
        for i in range(args.files):
            with open(folder / f"data-{i:05d}.arrow", "wb") as handle:
                for _ in range(per_file):
                    handle.write(block)
        records = file_records(folder)
        paths = [folder / name for name in records]

        def read_all() -> None:
            for path in paths:
                with open(path, "rb", buffering=0) as handle:
                    buffer = bytearray(1 << 22)
                    while handle.readinto(buffer):
                        pass

        read = _best(read_all, args.repeat)
        verify = _best(lambda: verify_files(folder, records), args.repeat)
        total = per_file * args.files
        figures = {
            "mb": total,
            "files": args.files,
            "read_s": round(read, 3),
            "verify_s": round(verify, 3),
            "read_mb_per_s": round(total / read),
            "verify_mb_per_s": round(total / verify),
            "verify_over_read": round(verify / read, 2),
        }
        print(json.dumps(figures))
    if args.results:
        print(f"wrote {write_results('verify', figures, command_line())}")


if __name__ == "__main__":
    main()

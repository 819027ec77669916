"""Benchmark: how long the light ``lightning-order`` commands take to answer, each in a fresh process.

Times the wall clock of ``lightning-order --help``, ``lightning-order graph`` (the standard
pipeline as Mermaid), ``lightning-order audit <cache>`` and a ``prepare`` of the tiny demo that
finds its cache finished, each run ``--runs`` times in a fresh process; the median counts. The
cache is prepared once first, untimed. None of these commands imports torch or Lightning
(``tests/unit/cli/test_dispatch.py`` checks that), so what is timed is Python's start-up, the
dispatch and the command itself; the target is under 2 s each. A fresh process is what a user
meets, so the page cache is warm (the first, untimed run) but nothing is kept in memory between
runs.

Usage::

    python benchmarks/bench_cli_start.py --runs 5 [--results]   # --results: benchmarks/results/cli_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import ROOT, command_line, write_results

#: The tiny demo that ``prepare`` finds finished (the README's ``--data.demo_size=300 ...``).
PREPARE = ["prepare", "--config", str(ROOT / "configs" / "demo.yaml"), "--data.demo_size=300",
           "--data.vocab_size=200", "--data.max_length=32"]  # fmt: skip


def entry() -> list[str]:
    """The ``lightning-order`` console script beside this Python, or ``python -m lightning_order`` (the same)."""
    script = Path(sys.executable).with_name("lightning-order")
    return [str(script)] if script.exists() else [sys.executable, "-m", "lightning_order"]


def run(args: list[str], env: dict[str, str]) -> float:
    """Seconds of wall clock one fresh process takes to run ``lightning-order args``; it must succeed."""
    start = time.perf_counter()
    subprocess.run([*entry(), *args], check=True, capture_output=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, float | int]:
    """Runs the benchmark with the command-line arguments ``argv``; returns the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per command; the median counts")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/cli_start.json, the figures the docs quote",
    )
    args = parser.parse_args(argv)
    # The worktree's code, whichever copy of the package is installed.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory() as cache:
        prepare = [*PREPARE, "--data.cache_dir", cache]
        commands = {
            "help": ["--help"],
            "graph": ["graph"],
            "audit": ["audit", cache],
            "cached_prepare": prepare,
        }
        run(prepare, env)  # prepares the cache: untimed, and warms the page cache for every command
        figures: dict[str, float | int] = {"runs": args.runs}
        for name, command in commands.items():
            times = [run(command, env) for _ in range(args.runs)]
            figures[f"{name}_s"] = round(statistics.median(times), 2)
            figures[f"{name}_max_s"] = round(max(times), 2)
    print(json.dumps(figures))
    if args.results:
        print(f"wrote {write_results('cli_start', figures, command_line())}")
    return figures


if __name__ == "__main__":
    main()

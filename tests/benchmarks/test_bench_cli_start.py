"""benchmarks/bench_cli_start.py times every light command it names, each in fresh processes."""

from __future__ import annotations

from helpers import load_benchmark

bench = load_benchmark("bench_cli_start")


def test_every_light_command_is_timed_and_succeeds() -> None:
    figures = bench.main(["--runs", "1"])  # a command that fails raises CalledProcessError
    assert figures["runs"] == 1
    for name in ("help", "graph", "audit", "cached_prepare"):
        assert 0 < figures[f"{name}_s"] <= figures[f"{name}_max_s"]

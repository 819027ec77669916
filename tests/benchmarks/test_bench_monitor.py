"""benchmarks/bench_monitor.py runs end to end on a few steps and states what it measured: each
variant in every round of three steps, an interval around each median, the all-gathers."""

from __future__ import annotations

import statistics

from helpers import load_benchmark

bench = load_benchmark("bench_monitor")


class _Trainer:
    """What the rotation reads of a Trainer: the global step and the callback list."""

    global_step = 1

    def __init__(self) -> None:
        self.callbacks: list = []


def test_every_round_runs_each_variant_once() -> None:
    rotate = bench._Rotate({v: None for v in bench.VARIANTS}, warmup=0, clock=bench._Clock())
    trainer, seen = _Trainer(), []
    for _ in range(3 * 20):
        seen.append(rotate.current)
        rotate.on_train_batch_end(trainer)
    rounds = [seen[i : i + 3] for i in range(1, len(seen) - 2, 3)]
    assert all(sorted(r) == sorted(bench.VARIANTS) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled, not one fixed phase per variant


def test_the_rounded_interval_holds_its_median() -> None:
    # Rounding the bounds to the nearest 0.01 put a median of 2.2504 outside [.., 2.25] (a flaky test).
    values = [2.2504, 2.2504, 2.2504, 1.0]
    low, high = bench.median_interval(values)
    assert low <= statistics.median(values) <= high and high == 2.26


def test_a_short_run_reports_overheads_with_intervals() -> None:
    result = bench.bench(steps=90, repeats=2, batch_size=16, warmup=10)
    for variant in ("empty", "monitor"):
        low, high = result[f"cpu_overhead_percent_{variant}_interval"]
        assert low <= result[f"cpu_overhead_percent_{variant}"] <= high
        assert len(result[f"cpu_overhead_percent_{variant}_runs"]) == 2
    assert result["cpu_step_ms"] > 0
    assert "one per check" in result["all_gathers"]


def test_a_block_keeps_each_variant_for_its_steps() -> None:
    rotate = bench._Rotate({v: None for v in bench.VARIANTS}, warmup=0, clock=bench._Clock(), block=4)
    trainer, seen = _Trainer(), []
    for _ in range(4 * 9):
        seen.append(rotate.current)
        rotate.on_train_batch_end(trainer)
    runs = [seen[i : i + 4] for i in range(0, len(seen), 4)]
    assert all(len(set(r)) == 1 for r in runs)  # one variant per block of four steps
    assert {r[0] for r in runs} == set(bench.VARIANTS)

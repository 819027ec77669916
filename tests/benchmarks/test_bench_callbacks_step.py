"""benchmarks/bench_callbacks_step.py runs end to end on a few steps: the five variants take turns,
each once per round, with only its own callbacks in the list, and each is reported against no
callback with an interval around its median."""

from __future__ import annotations

from helpers import load_benchmark

bench = load_benchmark("bench_callbacks_step")


class _Trainer:
    """What the rotation reads of a Trainer: the global step and the callback list."""

    global_step = 1

    def __init__(self, callbacks: list) -> None:
        self.callbacks = callbacks


def test_every_round_runs_each_variant_once_with_only_its_callbacks() -> None:
    a, b = object(), object()
    members = {"none": [], "empty": [object()], "validator": [a], "monitor": [b], "both": [a, b]}
    clock = bench.StepClock()
    rotation = bench.Rotation(members, warmup=0, clock=clock)
    last = object()
    trainer, seen = _Trainer([clock, last]), []
    for _ in range(5 * 12):
        rotation.on_train_batch_end(trainer)
        seen.append(rotation.current)
        assert trainer.callbacks == [clock, *members[rotation.current], last]
    rounds = [seen[i : i + 5] for i in range(0, len(seen), 5)]
    assert all(sorted(r) == sorted(bench.VARIANTS) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1  # shuffled, not one fixed phase per variant


def test_a_short_run_reports_each_variant_against_no_callback() -> None:
    result = bench.bench(steps=60, repeats=2, batch_size=8, warmup=5, dispatch_calls=200)
    assert result["cpu_step_ms"] > 0
    for variant in bench.VARIANTS[1:]:
        low, high = result[f"cpu_percent_{variant}_interval"]
        assert low <= result[f"cpu_percent_{variant}"] <= high
        assert len(result[f"cpu_percent_{variant}_runs"]) == 2
    # Lightning dispatches no per-batch hook to the validator, two a step to the monitor (not six)
    dispatch = result["dispatch_us"]
    assert dispatch["validator"] < dispatch["monitor"] < dispatch["empty"]

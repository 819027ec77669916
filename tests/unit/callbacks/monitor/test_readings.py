"""What SymptomMonitor gathers per step, and the shortcuts that keep its checks cheap: the losses
it reads (tensors left on their device until the check, then read at once) and the gate
before the starvation detector (it must never hide a starved run). The losses a real run hands the
monitor, in order: tests/integration/test_symptom_monitor.py."""

from __future__ import annotations

import math
import random

import pytest
import torch

from lightning_order.callbacks.monitor.readings import to_host
from lightning_order.callbacks.monitor.step_clock import StepClock
from lightning_order.checks.symptoms import detect_data_starvation


def test_to_host_reads_losses_in_step_order_and_flattens_counts() -> None:
    losses = [torch.tensor(1.5), torch.tensor([2.5, 3.5]), torch.tensor(4.5)]
    counts = [torch.tensor([3, 100]), torch.tensor([0, 90])]
    assert to_host(losses, counts) == ([1.5, 2.5, 3.5, 4.5], [3.0, 100.0, 0.0, 90.0])
    assert to_host(losses[:1], []) == ([1.5], [])
    assert to_host([], counts[:1]) == ([], [3.0, 100.0])
    assert to_host([], []) == ([], [])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_host_joins_device_tensors_in_one_read() -> None:
    losses = [torch.tensor(1.5, device="cuda"), torch.tensor([2.5, 3.5], device="cuda")]
    counts = [torch.tensor([3, 100], device="cuda")]
    assert to_host(losses, counts) == ([1.5, 2.5, 3.5], [3.0, 100.0])


def _gate(waits: list[float]) -> bool:
    clock = StepClock(50)
    clock.waits.extend(waits)
    return clock.may_starve(0.02)


def test_the_starvation_gate_never_hides_a_starved_run() -> None:
    rng = random.Random(0)
    fired = 0
    for _ in range(2000):
        n = rng.randint(20, 50)
        waits = [rng.choice([-1.0, rng.uniform(0, 0.01), rng.uniform(0.015, 0.2)]) for _ in range(n)]
        steps = [rng.uniform(0.001, 0.05) for _ in range(n)]
        known = [(w, s) for w, s in zip(waits, steps) if w >= 0]
        starved = detect_data_starvation([w for w, _ in known], [s for _, s in known], step=0)
        fired += starved is not None
        assert _gate(waits) or starved is None
    assert fired > 100  # the property was tried on starved runs too
    assert not _gate([0.0001] * 50)  # a healthy run: the max settles it
    assert not _gate([0.0001] * 40 + [0.5] * 10)  # a few slow batches are no starvation


def test_the_step_clock_turns_marks_into_waits_and_steps() -> None:
    clock = StepClock(50)
    clock.marks.extend([1.0, 1.5, 2.0, 2.25])  # batch 1: 1.0-1.5, batch 2: 2.0-2.25
    clock.read()
    assert list(clock.waits) == [-1.0, 0.5] and list(clock.steps) == [0.5, 0.25]  # first wait unknown
    clock.resume_at(3.0)  # a check ended at 3.0: its time is no wait
    clock.marks.extend([3.5, 4.0, 4.5])  # a batch, and the start of the next (read later)
    clock.read()
    assert list(clock.waits)[-1] == 0.5 and clock.marks == [4.5]
    clock.marks.append(5.0)
    clock.pause()  # a new epoch or a validation: the next batch's wait is unknown
    clock.marks.extend([9.0, 9.5])
    clock.read()
    assert list(clock.waits)[-2:] == [0.5, -1.0]
    assert clock.known() == ([0.5, 0.5, 0.5], [0.25, 0.5, 0.5])


def test_the_train_loss_at_a_validation_comes_from_the_stretch_before_it() -> None:
    from lightning_order.callbacks.monitor.detection import resolve_thresholds
    from lightning_order.callbacks.monitor.readings import TrainReadings

    readings = TrainReadings(resolve_thresholds(None, None))

    def steps(values: list[float]) -> None:
        readings.pending.extend(torch.tensor(v) for v in values)

    # Epoch 1 falls geometrically from 2.0; epoch 2 starts lower (rows come round again).
    steps([2.0 * 0.97**i for i in range(40)])
    assert readings.add_validation(1.0, near=50)
    assert readings.epoch_train[-1] == pytest.approx(2.0 * 0.97**40, rel=1e-4)  # carried to the step
    assert readings.train_spread[-1] == pytest.approx(0.0, abs=1e-6)
    readings.new_stretch()
    steps([0.2 * 0.99**i for i in range(30)])
    assert readings.add_validation(0.25, near=50)
    # Only the new epoch's losses: the jump at its start does not bend the trend.
    assert readings.epoch_train[-1] == pytest.approx(0.2 * 0.99**30, rel=1e-4)
    steps([0.1, 0.12])  # a validation two steps later borrows from the stretch before (8 at least)
    assert readings.add_validation(0.2, near=50) and readings.train_spread[-1] > 0
    assert readings.epoch_val == [1.0, 0.25, 0.2] and len(readings.train_spread) == 3
    assert not readings.add_validation(None, near=50)  # no validation loss logged: nothing kept


def test_input_stats_give_mean_std_rows_and_kurtosis_of_raw_columns() -> None:
    # Word counts near 60 with a long tail: float32 moments about the first batch's means keep
    # the spread (raw fourth powers would cancel), and the kurtosis shows the tail.
    import numpy as np

    from lightning_order.callbacks.monitor.readings import InputStats

    rng = np.random.default_rng(0)
    words = np.exp(rng.normal(4.0, 0.8, size=(300, 2))) + 1000.0
    stats = InputStats()
    for start in range(0, 300, 64):
        stats.add({"x": torch.tensor(words[start : start + 64], dtype=torch.float32)})
    vector = stats.vector(3, torch.device("cpu")).tolist()
    mean, std, count, kurt = (vector[i * 3 : i * 3 + 2] for i in range(4))
    assert mean == pytest.approx(words.mean(0).tolist(), rel=1e-5)
    assert std == pytest.approx(words.std(0).tolist(), rel=1e-3)
    assert count == [300.0, 300.0]
    centred = words - words.mean(0)
    expected = ((centred**4).mean(0) / words.var(0) ** 2).tolist()
    assert kurt == pytest.approx(expected, rel=1e-2) and min(kurt) > 3  # heavier than normal
    assert all(math.isnan(v) for v in vector[2::3][:4])  # the unused third column stays unknown

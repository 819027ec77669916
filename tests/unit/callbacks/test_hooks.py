"""``lightning_order.callbacks.hooks``: Lightning calls only the per-batch hooks a callback implements.

Every hook Lightning dispatches opens a profiler span named ``[Callback]<state_key>.<hook>``; a
``SimpleProfiler`` records each, so the spans of a short fit show which hooks were called.
"""

from __future__ import annotations

from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.demos.boring_classes import BoringModel
from pytorch_lightning.profilers import SimpleProfiler

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order.callbacks.hooks import BATCH_HOOKS, resume_calling, skip_unused_batch_hooks, stop_calling


class _Counting(OrderValidator):
    """A user's subclass that implements one per-batch hook: it must still be called."""

    def __init__(self) -> None:
        super().__init__(on_violation="warn")
        self.backward_calls = 0

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        self.backward_calls += 1


def _spans(callbacks: list[Any], steps: int = 4) -> dict[str, int]:
    profiler = SimpleProfiler()
    trainer = pl.Trainer(
        max_steps=steps,
        limit_val_batches=2,
        val_check_interval=2,
        accelerator="cpu",
        callbacks=callbacks,
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    torch.manual_seed(0)
    trainer.fit(BoringModel())
    return {
        name: len(times)
        for name, times in profiler.recorded_durations.items()
        if name.startswith("[Callback]")
    }


def test_the_validator_gets_no_call_per_batch_and_the_monitor_two_a_step():
    validator, monitor = OrderValidator(on_violation="warn"), SymptomMonitor(verbose=False)
    spans = _spans([validator, monitor])
    per_batch = {
        hook: count
        for name, count in spans.items()
        if validator.state_key in name and (hook := name.rsplit(".", 1)[1]) in BATCH_HOOKS
    }
    # its checks run before step 1 (or on step 1): no hook of it is called on every batch
    assert all(count <= 1 for count in per_batch.values()), per_batch
    called = {name.rsplit(".", 1)[1] for name in spans if monitor.state_key in name}
    assert called & set(BATCH_HOOKS) == {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_validation_batch_start",
    }
    assert spans[f"[Callback]{monitor.state_key}.on_train_batch_end"] == 4


def test_a_hook_a_subclass_implements_is_still_called():
    counting = _Counting()
    skipped = skip_unused_batch_hooks(counting)
    assert "on_before_backward" not in skipped and "on_after_backward" in skipped
    _spans([counting], steps=3)
    assert counting.backward_calls == 3


def test_a_hook_stopped_after_a_step_is_skipped_until_resumed():
    counting = _Counting()
    calls: list[int] = []

    def stop_after_one(*args: Any) -> None:
        calls.append(1)
        stop_calling(counting, "on_before_backward")

    counting.on_before_backward = stop_after_one  # the hook stops itself once it has run
    _spans([counting], steps=3)
    assert len(calls) == 1 and counting.on_before_backward is None
    resume_calling(counting, "on_before_backward")
    _spans([counting], steps=2)
    assert counting.backward_calls == 2  # the class's method again


def test_only_per_batch_hooks_can_be_stopped():
    with pytest.raises(ValueError, match="on_save_checkpoint"):
        stop_calling(SymptomMonitor(), "on_save_checkpoint")

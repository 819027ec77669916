"""``lightning_order.callbacks.hooks``: Lightning calls only the per-batch hooks a callback implements.

Every hook Lightning dispatches opens a profiler span named ``[Callback]<state_key>.<hook>``; a
``SimpleProfiler`` records each, so the spans of a short fit show which hooks were called.
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.demos.boring_classes import BoringModel
from pytorch_lightning.profilers import SimpleProfiler

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order.callbacks.hooks import BATCH_HOOKS, skip_unused_batch_hooks


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


def test_the_validator_gets_no_per_batch_call_and_the_monitor_two_a_step():
    validator, monitor = OrderValidator(on_violation="warn"), SymptomMonitor(verbose=False)
    spans = _spans([validator, monitor])
    called = {name.rsplit(".", 1)[1] for name in spans if validator.state_key in name}
    assert not called & set(BATCH_HOOKS)  # its checks ran at fit start: nothing per batch
    called = {name.rsplit(".", 1)[1] for name in spans if monitor.state_key in name}
    assert called & set(BATCH_HOOKS) == {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_validation_batch_start",
    }
    assert spans[f"[Callback]{monitor.state_key}.on_train_batch_end"] == 4


def test_a_hook_a_subclass_implements_is_still_called():
    counting = _Counting()
    assert skip_unused_batch_hooks(counting) == tuple(h for h in BATCH_HOOKS if h != "on_before_backward")
    _spans([counting], steps=3)
    assert counting.backward_calls == 3

"""Recovery end to end: pause() writes the checkpoint, recover() chooses the path and repairs; a paused
vocab-before-clean run recovered for real. (recover() on hand-made pauses: tests/unit/recovery/test_plan.py; the repairs: test_weights.py
and the decisions: test_decisions.py beside it; cost: tests/unit/core/test_cost.py; safe loading:
test_checkpoint_safety.py.)"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from orders import WRONG_ORDERS

from lightning_order.errors import OrderWarning
from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.models import OrderedTextClassifier
from lightning_order.recovery import recover

VOCAB_BEFORE_CLEAN = WRONG_ORDERS["vocab-before-clean"]


# -- recover: the init and resume paths -------------------------------------------------------
DIMS = {"vocab_size": 80, "num_features": 5, "num_classes": 4, "max_length": 32}


# -- the data path, end to end ----------------------------------------------------------------
class ValAccuracyTrace(pl.Callback):
    """Records (step, val_acc) at each validation; stops once ``target`` is reached."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.trace: list[tuple[int, float]] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        accuracy = float(trainer.callback_metrics["val_acc"])
        self.trace.append((trainer.global_step, accuracy))
        if accuracy >= self.target:
            trainer.should_stop = True

    @property
    def reached_at(self) -> int | None:
        return next((step for step, acc in self.trace if acc >= self.target), None)


@pytest.mark.slow
def test_vocab_before_clean_run_paused_then_recovered_beats_a_fresh_run(tmp_path: Path, capsys) -> None:
    from lightning_order.callbacks.monitor.callback import SymptomMonitor
    from lightning_order.data.text.datamodule import OrderedDataModule

    cache = str(tmp_path / "cache")
    pl.seed_everything(0)
    wrong = OrderedDataModule(
        demo_size=2000, vocab_size=2000, seed=0, cache_dir=cache, order=VOCAB_BEFORE_CLEAN, enforce=False
    )
    monitor = SymptomMonitor(on_symptom="stop", gpu_hour_price=4.0)
    trainer = quiet_trainer(tmp_path / "paused", [monitor], max_epochs=3, limit_val_batches=0)
    with pytest.warns(OrderWarning, match="plateau"):
        trainer.fit(OrderedTextClassifier(**wrong.dims), wrong)
    assert monitor.pause_path is not None
    paused_at = trainer.global_step
    checkpoint = torch.load(monitor.pause_path, weights_only=True)
    payload = checkpoint[CHECKPOINT_KEY]
    assert payload["ledger"]["records"][1]["step"] == "build_vocab"  # the wrong order, in the ledger
    assert payload["reason"][0]["suspected_rule"] == "vocab-before-clean"
    assert payload["waste"]["cost"] == pytest.approx(payload["waste"]["device_hours"] * 4.0)

    plan = recover(monitor.pause_path, cache_dir=cache)
    assert plan.path == "data" and plan.ckpt_path is None and plan.advice == "continue"
    assert list(plan.datamodule.order) == list(OrderedDataModule(cache_dir=cache).order)  # mandated
    assert plan.datamodule.enforce
    # Rows of tokens in both vocabularies are bit-identical after the remap.
    old_vocab, new_vocab = payload["vocab"], plan.datamodule.tokenizer.get_vocab()
    common = [t for t in new_vocab if t in old_vocab]
    assert plan.remapped["embedding.weight"]["common"] == len(common) > 50
    old_table, new_table = checkpoint["state_dict"]["embedding.weight"], plan.model.embedding.weight
    for token in common:
        assert torch.equal(new_table[new_vocab[token]], old_table[old_vocab[token]]), token
    # Every other parameter whose shape matches is kept.
    for name in plan.kept:
        assert torch.equal(plan.model.state_dict()[name], checkpoint["state_dict"][name]), name
    assert "head.3.weight" in plan.kept and "feature_proj.weight" in plan.kept

    # Further steps to a target validation accuracy: recovered vs a fresh correct run.
    target, budget = 0.9, 120
    recovered = ValAccuracyTrace(target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderWarning)
        quiet_trainer(tmp_path / "recovered", [recovered], max_steps=budget, val_check_interval=5).fit(
            **plan.fit_kwargs()
        )
    pl.seed_everything(0)
    correct = OrderedDataModule(demo_size=2000, vocab_size=2000, seed=0, cache_dir=cache)
    fresh = ValAccuracyTrace(target)
    quiet_trainer(tmp_path / "fresh", [fresh], max_steps=budget, val_check_interval=5).fit(
        OrderedTextClassifier(**correct.dims), correct
    )
    with capsys.disabled():
        print(
            f"\n[recovery] paused at step {paused_at}; val_acc >= {target}: recovered after "
            f"{recovered.reached_at} further steps, fresh correct run after {fresh.reached_at} steps"
        )
    assert recovered.reached_at is not None and fresh.reached_at is not None
    assert recovered.reached_at < fresh.reached_at


# -- pause() called by another check (e.g. a mid-run order check) ----------------------------
class PauseAt(pl.Callback):
    def __init__(self, step: int, path: Path, reason: list) -> None:
        self.step, self.path, self.reason = step, path, reason

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            from lightning_order.recovery import pause

            pause(trainer, self.path, reason=self.reason, gpu_hour_price=1.5, elapsed_s=7200.0)


def _contract_batches(n: int = 64) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    rows = [
        {
            "input_ids": torch.randint(1, 80, (12,), generator=g),
            "attention_mask": torch.ones(12, dtype=torch.long),
            "features": torch.randn(5, generator=g),
            "labels": torch.randint(0, 4, (), generator=g),
        }
        for _ in range(n)
    ]
    return torch.utils.data.DataLoader(rows, batch_size=8)


def test_pause_from_a_violation_stops_and_recovers_on_the_init_path(tmp_path: Path) -> None:
    from lightning_order.rules import Violation

    violation = Violation("init-before-data", ("init_model", "encode"), "the model was built before the data")
    trainer = quiet_trainer(tmp_path, [PauseAt(3, tmp_path / "pause.ckpt", [violation])], max_steps=50)
    model = OrderedTextClassifier(**DIMS)
    trainer.fit(model, _contract_batches())
    assert trainer.global_step == 3  # stopped right after the pause
    checkpoint = torch.load(tmp_path / "pause.ckpt", weights_only=True)
    payload = checkpoint[CHECKPOINT_KEY]
    assert payload["reason"][0]["type"] == "violation" and payload["reason"][0]["rule"] == "init-before-data"
    assert payload["waste"]["device_hours"] == pytest.approx(2.0) and payload["waste"][
        "cost"
    ] == pytest.approx(3.0)
    assert payload["ledger"] is None and payload["vocab"] is None  # no OrderedDataModule here
    assert checkpoint["global_step"] == 3 and checkpoint["optimizer_states"]
    plan = recover(tmp_path / "pause.ckpt", datamodule=SimpleNamespace(dims={**DIMS, "num_features": 6}))
    assert plan.path == "init" and plan.reinitialised == ["feature_proj.weight"]
    assert plan.advice == "continue"  # 3 of 50 steps is 6%: above the 5% restart line

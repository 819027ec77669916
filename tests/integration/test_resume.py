"""Resuming a run mid-epoch, in one process (DESIGN.md §1e): the resumed run reads exactly the batches
an uninterrupted one reads, and a resume that would replay or skip is ``resume-position`` before
its first step. With Lightning's own mechanics only: ``ModelCheckpoint(every_n_train_steps=...)``,
then ``Trainer.fit(ckpt_path=...)``.

Under DDP, and from 2 ranks to 1: tests/distributed/test_resume_ddp.py. The pure check:
tests/unit/checks/test_resume.py; the loader: tests/unit/data/engine/test_loaders.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import quiet_trainer
from pytorch_lightning.callbacks import ModelCheckpoint
from resumes import BatchHashes, PlainData, PlainModel, datamodule, model

from lightning_order import OrderError, OrderValidator, recover
from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.recovery import pause

pytestmark = pytest.mark.slow

TRAIN = {"max_epochs": 2, "limit_val_batches": 1, "enable_checkpointing": True}


@pytest.fixture(scope="module", params=["standard", "lm"])
def reference(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, resume_cache: Path
) -> dict[str, Any]:
    """An uninterrupted run of 2 epochs, checkpointed after every step; its per-batch hashes."""
    kind, root = request.param, tmp_path_factory.mktemp(f"resume-{request.param}")
    dm = datamodule(kind, resume_cache)
    hashes = BatchHashes()
    every = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}")
    quiet_trainer(root, [OrderValidator(), hashes, every], **TRAIN).fit(model(kind, dm), dm)
    steps = len(hashes.batches) // 2
    return {"kind": kind, "root": root, "cache": resume_cache, "hashes": hashes.hashes(), "steps": steps}


@pytest.mark.parametrize("stop", ["mid-epoch", "last-of-epoch", "first-of-next"])
def test_a_resumed_run_reads_the_batches_of_the_uninterrupted_run(
    reference: dict[str, Any], stop: str
) -> None:
    kind, root, steps = reference["kind"], reference["root"], reference["steps"]
    step = {"mid-epoch": 5, "last-of-epoch": steps, "first-of-next": steps + 1}[stop]
    dm, hashes, validator = datamodule(kind, reference["cache"]), BatchHashes(), OrderValidator()
    trainer = quiet_trainer(root, [validator, hashes], **TRAIN)
    trainer.fit(model(kind, dm), dm, ckpt_path=str(root / "ckpt" / f"step={step}.ckpt"))
    assert hashes.hashes() == reference["hashes"][step:]  # num_workers=2: no batch replayed or skipped
    assert validator.violations == []
    epoch, at = divmod(step, steps)
    resumed = dm.ledger.latest("train").stats["resumed_at"]
    assert resumed == {
        "epoch": epoch,
        "batches": at,
        "samples": at * 32 if kind == "standard" else at * 128,
        "global_step": step,
    }


def _plain_checkpoints(tmp_path: Path) -> Path:
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    quiet_trainer(tmp_path, [OrderValidator(), every], **TRAIN).fit(PlainModel(), PlainData())
    return tmp_path


def test_a_plain_dataloader_resumed_mid_epoch_is_resume_position_before_its_first_step(
    tmp_path: Path,
) -> None:
    folder = _plain_checkpoints(tmp_path)
    hashes, plain = BatchHashes(), PlainModel()
    trainer = quiet_trainer(tmp_path, [OrderValidator(), hashes], **TRAIN)
    with pytest.raises(OrderError) as caught:
        trainer.fit(plain, PlainData(), ckpt_path=str(folder / "step=4.ckpt"))
    assert caught.value.rules == ["resume-position"]
    (violation,) = caught.value.violations
    # The loader restarts epoch 0: batches 0-5 come again, 0-3 trained on already, 6-9 never.
    assert (violation.details["replayed"], violation.details["skipped"]) == (40, 40)
    assert "replay 40 samples already trained on and skip 40 samples never seen" in str(caught.value)
    assert hashes.batches == [] and trainer.global_step == 4  # stopped before the first resumed step


def test_a_plain_dataloader_resumed_at_an_epoch_boundary_is_no_violation(tmp_path: Path) -> None:
    folder = _plain_checkpoints(tmp_path)
    validator, hashes = OrderValidator(), BatchHashes()
    quiet_trainer(tmp_path, [validator, hashes], **TRAIN).fit(
        PlainModel(), PlainData(), ckpt_path=str(folder / "step=10.ckpt")
    )
    assert validator.violations == [] and [(e, i) for e, i, _ in hashes.batches] == [
        (1, i) for i in range(10)
    ]


def test_a_checkpoint_saved_after_fit_returned_mid_epoch_skips_the_rest_of_it(tmp_path: Path) -> None:
    """Lightning counts the epoch that max_steps interrupted as ended; the validator says what that skips."""
    first = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3, enable_checkpointing=True)
    first.fit(PlainModel(), PlainData())
    first.save_checkpoint(tmp_path / "after.ckpt")
    with pytest.raises(OrderError, match="counts epoch 0 as ended") as caught:
        quiet_trainer(tmp_path, [OrderValidator()], **TRAIN).fit(
            PlainModel(), PlainData(), ckpt_path=str(tmp_path / "after.ckpt")
        )
    assert caught.value.violations[0].details["skipped"] == 70


class _PauseAt(BatchHashes):
    """Pauses the run (an emergency checkpoint, every rank stops) after ``step`` optimizer steps."""

    def __init__(self, step: int, path: Path) -> None:
        super().__init__()
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            pause(trainer, self.path)


def test_a_paused_run_carries_its_position_and_recover_resumes_it_exactly(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    if reference["kind"] != "standard":
        pytest.skip("one DataModule is enough: the pause is the same for both")
    kind, root = reference["kind"], reference["root"]
    dm, paused = datamodule(kind, reference["cache"]), _PauseAt(7, tmp_path / "pause.ckpt")
    quiet_trainer(root, [OrderValidator(), paused], **TRAIN).fit(model(kind, dm), dm)
    checkpoint = torch.load(tmp_path / "pause.ckpt", map_location="cpu", weights_only=True)
    position = checkpoint[CHECKPOINT_KEY]["position"]
    assert (position["epoch"], position["samples"], position["global_batch"], position["seed"]) == (
        0,
        224,
        32,
        0,
    )
    plan = recover(tmp_path / "pause.ckpt", model_cls=type(model(kind, dm)), path="resume")
    assert plan.position == position and plan.ckpt_path == str(tmp_path / "pause.ckpt")
    dm, hashes = datamodule(kind, reference["cache"]), BatchHashes()
    quiet_trainer(root, [OrderValidator(), hashes], **TRAIN).fit(plan.model, dm, ckpt_path=plan.ckpt_path)
    assert paused.hashes() == reference["hashes"][:7] and hashes.hashes() == reference["hashes"][7:]

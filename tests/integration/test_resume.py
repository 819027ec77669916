"""Resuming a run mid-epoch, in one process (docs/architecture.md, "The train order and the position"): the resumed run reads exactly the batches
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
from resumes import BATCH, BatchHashes, PlainData, PlainModel, datamodule, model
from torch.utils.data import DataLoader

from lightning_order import CheckpointError, OrderedDataModule, OrderError, OrderValidator, recover
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


# -- continuing training from a checkpoint saved after fit() returned (issue #32) ----------------------
@pytest.fixture(scope="module", params=["standard", "lm"])
def straight(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, resume_cache: Path
) -> dict[str, Any]:
    """An uninterrupted run of one epoch and 4 steps (its first 8 steps are an 8-step run's); its batches."""
    kind, root = request.param, tmp_path_factory.mktemp(f"straight-{request.param}")
    dm = datamodule(kind, resume_cache, num_workers=0)
    dm.prepare_data()
    dm.setup("fit")
    steps, hashes = len(dm.train_dataloader()), BatchHashes()
    quiet_trainer(root, [OrderValidator(), hashes], max_steps=steps + 4, limit_val_batches=0).fit(
        model(kind, dm), dm
    )
    return {"kind": kind, "cache": resume_cache, "hashes": hashes.hashes(), "steps": steps}


@pytest.mark.parametrize("stop", ["mid-epoch", "end-of-epoch"])
def test_a_run_continued_from_a_checkpoint_saved_after_fit_reads_the_batches_of_an_uninterrupted_run(
    straight: dict[str, Any], stop: str, tmp_path: Path
) -> None:
    """Train 4 steps (or one whole epoch), save after fit() returned, go on: no batch replayed or skipped.

    Lightning counts the epoch that max_steps interrupted as ended and starts its next one; the
    data position is the loader's, so the rest of the epoch comes first, then the next epoch.
    """
    kind, steps, cache = straight["kind"], straight["steps"], straight["cache"]
    at = 4 if stop == "mid-epoch" else steps
    dm, first = datamodule(kind, cache, num_workers=0), BatchHashes()
    trainer = quiet_trainer(tmp_path, [OrderValidator(), first], max_steps=at, limit_val_batches=0)
    trainer.fit(model(kind, dm), dm)
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    dm, hashes, validator = datamodule(kind, cache, num_workers=0), BatchHashes(), OrderValidator()
    quiet_trainer(tmp_path, [validator, hashes], max_steps=steps + 4, limit_val_batches=0).fit(
        model(kind, dm), dm, ckpt_path=str(tmp_path / "after.ckpt")
    )
    assert first.hashes() == straight["hashes"][:at]
    assert hashes.hashes() == straight["hashes"][at:]  # steps 5-8 (and on, into the next epoch)
    assert validator.violations == []
    epoch, done = divmod(at, steps)
    resumed = dm.ledger.latest("train").stats["resumed_at"]
    assert resumed == {"epoch": epoch, "batches": done, "samples": done * BATCH[kind], "global_step": at}


@pytest.mark.parametrize(
    ("saved", "at"), [("during-fit", 6), ("after-fit", 4), ("after-fit", 6)], ids=lambda v: str(v)
)
def test_a_run_with_limit_train_batches_continues_exactly_however_its_checkpoint_was_saved(
    resume_cache: Path, tmp_path: Path, saved: str, at: int
) -> None:
    """Epochs cut at 6 batches: a checkpoint at the cut (during the fit: Lightning starts the next
    epoch afresh; after fit(): it carries its count and has no batch left) or mid-epoch continues
    with the batches of the uninterrupted run."""
    limited = {"limit_train_batches": 6, "limit_val_batches": 0}
    dm, straight = datamodule("standard", resume_cache, num_workers=0), BatchHashes()
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    callbacks = [OrderValidator(), straight, every]
    quiet_trainer(tmp_path, callbacks, max_steps=10, enable_checkpointing=True, **limited).fit(
        model("standard", dm), dm
    )
    checkpoint = tmp_path / f"step={at}.ckpt"
    if saved == "after-fit":
        dm = datamodule("standard", resume_cache, num_workers=0)
        first = quiet_trainer(tmp_path, [OrderValidator()], max_steps=at, **limited)
        first.fit(model("standard", dm), dm)
        first.save_checkpoint(checkpoint := tmp_path / "after.ckpt")
    dm, hashes, validator = (
        datamodule("standard", resume_cache, num_workers=0),
        BatchHashes(),
        OrderValidator(),
    )
    quiet_trainer(tmp_path, [validator, hashes], max_steps=10, **limited).fit(
        model("standard", dm), dm, ckpt_path=str(checkpoint)
    )
    assert hashes.hashes() == straight.hashes()[at:] and validator.violations == []


# -- what a resume refuses, in one line before Lightning's own error -----------------------------------
@pytest.fixture(scope="module")
def four_steps(tmp_path_factory: pytest.TempPathFactory, resume_cache: Path) -> Path:
    """The text DataModule trained 4 steps (num_workers=0), checkpointed at every step: step=4.ckpt."""
    root = tmp_path_factory.mktemp("four-steps")
    dm = datamodule("standard", resume_cache, num_workers=0)
    every = ModelCheckpoint(dirpath=root, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    quiet_trainer(root, [OrderValidator(), every], max_steps=4, enable_checkpointing=True).fit(
        model("standard", dm), dm
    )
    return root


def _edit_position(source: Path, target: Path, **fields: Any) -> Path:
    """``source`` with ``fields`` set in every copy of the data position it holds."""
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    copies = list(checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"])
    copies += [checkpoint["OrderedDataModule"]["position"], checkpoint[CHECKPOINT_KEY]["position"]]
    copies += [s["position"] for k, s in checkpoint["callbacks"].items() if k.startswith("OrderValidator")]
    for position in copies:
        position.update(fields)
    torch.save(checkpoint, target)
    return target


@pytest.mark.parametrize(
    ("field", "value"), [("epoch", -1), ("samples", "128"), ("samples", None), ("samples", -32)]
)
@pytest.mark.parametrize("validator", [True, False], ids=["validator", "datamodule-alone"])
def test_a_garbage_position_in_a_checkpoint_is_one_checkpoint_error_naming_the_field(
    four_steps: Path, resume_cache: Path, tmp_path: Path, field: str, value: Any, validator: bool
) -> None:
    edited = _edit_position(four_steps / "step=4.ckpt", tmp_path / "edited.ckpt", **{field: value})
    dm, hashes = datamodule("standard", resume_cache, num_workers=0), BatchHashes()
    callbacks = [OrderValidator(), hashes] if validator else [hashes]
    with pytest.raises(CheckpointError) as caught:
        quiet_trainer(tmp_path, callbacks, max_steps=8).fit(model("standard", dm), dm, ckpt_path=str(edited))
    message = str(caught.value)
    assert f"the checkpoint's data position has {field}={value!r}, expected a whole number >= 0" in message
    assert "Resume from an intact checkpoint of this run" in message and hashes.batches == []


@pytest.mark.parametrize(
    ("samples", "says"),
    [
        (10**9, "samples=1000000000 lies beyond the"),
        (133, "samples=133 is not a whole number of global batches of 32"),
        (160, "which counts 4 batches of epoch 0 done"),
    ],
    ids=["next-epoch", "mid-batch", "skips-a-batch"],
)
def test_a_position_edited_alike_in_every_copy_is_resume_position_before_step_1(
    four_steps: Path, resume_cache: Path, tmp_path: Path, samples: int, says: str
) -> None:
    """Issue #42: the copies agree, so only the position's arithmetic and Lightning's loop count can tell."""
    edited = _edit_position(four_steps / "step=4.ckpt", tmp_path / "edited.ckpt", samples=samples)
    dm, hashes = datamodule("standard", resume_cache, num_workers=0), BatchHashes()
    with pytest.raises(OrderError) as caught:
        quiet_trainer(tmp_path, [OrderValidator(), hashes], max_steps=8).fit(
            model("standard", dm), dm, ckpt_path=str(edited)
        )
    assert caught.value.rules == ["resume-position"] and says in str(caught.value)
    assert hashes.batches == []


def test_limit_train_batches_set_at_resume_names_the_cause_and_the_checkpoints_epoch(
    four_steps: Path, resume_cache: Path, tmp_path: Path
) -> None:
    dm = datamodule("standard", resume_cache, num_workers=0)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=8, limit_train_batches=6)
    with pytest.raises(OrderError) as caught:
        trainer.fit(model("standard", dm), dm, ckpt_path=str(four_steps / "step=4.ckpt"))
    (violation,) = caught.value.violations
    assert violation.rule == "resume-position" and violation.details["skipped"] == 320
    assert "Lightning's epoch is 6 batches long in this run but was 16" in violation.message
    assert "limit_train_batches" in violation.message
    assert "leave limit_train_batches unset, as the checkpoint's run did" in violation.fix
    assert "resumable train loader" not in violation.fix  # it is one already


class _PlainTrainLoader(OrderedDataModule):
    """The text DataModule with its train loader swapped for a plain ``DataLoader`` over the same rows."""

    def train_dataloader(self) -> DataLoader:
        loader = super().train_dataloader()
        return DataLoader(loader.dataset, batch_size=loader.batch_size, collate_fn=loader.collate_fn)


def test_a_plain_dataloader_given_a_resumable_loaders_state_is_resume_position_before_lightnings_error(
    four_steps: Path, resume_cache: Path, tmp_path: Path
) -> None:
    dm = _PlainTrainLoader(
        demo_size=600,
        vocab_size=200,
        max_length=16,
        batch_size=32,
        num_workers=0,
        cache_dir=str(resume_cache),
    )
    hashes = BatchHashes()
    with pytest.raises(OrderError) as caught:  # not Lightning's "The CombinedLoader has 0 stateful loaders"
        quiet_trainer(tmp_path, [OrderValidator(on_violation="warn"), hashes], max_steps=8).fit(
            model("standard", dm), dm, ckpt_path=str(four_steps / "step=4.ckpt")
        )
    assert caught.value.rules == ["resume-position"]
    (violation,) = caught.value.violations
    assert "a ResumableLoader at sample 128 of epoch 0" in violation.message
    assert "this run's train loader (DataLoader) has 0 that can take it" in violation.message
    assert "OrderedDataModule / OrderedLMDataModule's train_dataloader()" in violation.fix
    assert hashes.batches == []

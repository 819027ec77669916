"""Resume: stored vs current data fingerprints, and the data position (``resume-position``)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks import (
    check_restore_shapes,
    check_resume,
    check_resume_position,
    check_resume_proof,
    stored_position,
)
from lightning_order.errors import CheckpointError
from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.positions import GlobalOrder, TrainPosition, epoch_order

FPS = {"manifest": "m" * 32, "split": "s" * 32, "statistics": "t" * 32, "vocab": "v" * 32}


def test_same_data_or_unknown_data_pass():
    assert check_resume(FPS, dict(FPS)) == []
    assert check_resume(None, FPS) == [] and check_resume({}, FPS) == [] and check_resume(FPS, {}) == []
    assert check_resume({"vocab": FPS["vocab"]}, FPS) == []  # an older checkpoint stored less


@pytest.mark.parametrize(
    ("key", "phrase"),
    [
        ("vocab", "token ids would silently mean other words"),
        ("statistics", "scaled differently"),
        ("split", "split changed"),
        ("manifest", "prepared data changed"),
    ],
)
def test_a_changed_fingerprint_is_resume_data_changed_naming_it(key, phrase):
    (violation,) = check_resume(FPS, {**FPS, key: "x" * 32})
    assert violation.rule == "resume-data-changed"
    assert phrase in violation.message and f"{key} {FPS[key][:12]} -> xxxxxxxxxxxx" in violation.message
    assert violation.details["changed"] == [key]


def test_the_most_telling_change_leads():
    (violation,) = check_resume(FPS, {**FPS, "manifest": "a", "vocab": "b"})
    assert violation.details["changed"] == ["vocab", "manifest"]
    assert violation.message.startswith("the vocabulary changed")
    assert violation.steps == ("build_vocab", "encode")


def test_a_checkpoint_without_fingerprints_cannot_prove_the_data():
    (violation,) = check_resume_proof(None, FPS)
    assert violation.rule == "resume-data-changed"
    assert "cannot prove the data is unchanged" in violation.message
    assert "OrderValidator(on_violation='warn')" in violation.fix
    assert check_resume_proof({}, FPS) == check_resume_proof(None, FPS)
    assert check_resume_proof(FPS, FPS) == [] and check_resume_proof({"vocab": "v"}, FPS) == []
    assert check_resume_proof(None, {}) == []  # this run has nothing to compare either: nothing to prove


@pytest.mark.parametrize(("fits", "rule"), [(True, "resume-data-changed"), (False, "init-before-data")])
def test_a_shape_mismatch_is_named_by_its_order_error_with_both_shapes(fits, rule):
    stored = {"embedding.weight": (300, 8), "head.weight": (2, 8), "only.in.checkpoint": (1,)}
    model = {"embedding.weight": (200, 8), "head.weight": (2, 8)}
    (violation,) = check_restore_shapes(stored, model, model_fits_data=fits)
    assert violation.rule == rule
    assert "embedding.weight: checkpoint [300, 8] vs model [200, 8]" in violation.message
    assert "head.weight" not in violation.message
    assert violation.details["shapes"] == {"embedding.weight": {"checkpoint": [300, 8], "model": [200, 8]}}
    assert check_restore_shapes(model, dict(model), model_fits_data=fits) == []


# -- resume-position: the data position the checkpoint saved against where the resumed run reads -------
def _ours(epoch: int, samples: int, batch: int = 10, size: int = 100, **order: object) -> dict:
    """A position of our loader (global batch ``batch`` on one rank), with Lightning's counts."""
    rule = GlobalOrder(size, batch, 1, 0, **order)
    facts = {"batches": samples // batch, "epoch_batches": size // batch}
    return {**facts, **TrainPosition.of(rule, epoch, samples, rule.digest(epoch)).to_dict()}


def _resumed(
    epoch: int, batches: int, batch: int = 10, size: int = 100, nxt: dict | None = None, **kw
) -> dict:
    """Where the resumed run reads: Lightning's epoch and count, and the loader's restored position."""
    facts = {"epoch": epoch, "batches": batches, "epoch_batches": size // batch, "global_batch": batch}
    facts.update(world_size=1, batch_size=batch, loader="ResumableLoader", resumable=True, next=nxt)
    return {**facts, **kw}


def _plain(epoch: int, batches: int) -> dict:
    return {
        "epoch": epoch,
        "batches": batches,
        "epoch_batches": 10,
        "global_batch": 10,
        "samples": batches * 10,
    }


def _one(stored, resumed):
    (violation,) = check_resume_position(stored, resumed)
    assert violation.rule == "resume-position" and violation.steps == ("train",)
    return violation


def test_a_resumable_loader_restored_where_the_checkpoint_stopped_passes():
    assert check_resume_position(_ours(0, 30), _resumed(0, 3, nxt=_ours(0, 30))) == []
    # The checkpoint ended its epoch (the last step): the next epoch starts at its head.
    assert check_resume_position(_ours(0, 100), _resumed(1, 0, nxt=_ours(1, 0))) == []
    # A stateful loader of another kind keeps its own position; an epoch of unknown length, nothing.
    assert check_resume_position(_plain(0, 4), _resumed(0, 4, nxt=None)) == []
    assert check_resume_position(_ours(0, 30), _resumed(0, 3, nxt=_ours(0, 30), epoch_batches=None)) == []
    assert check_resume_position(_ours(0, 30), None) == []


@pytest.mark.parametrize("stored", [_plain(0, 4), None], ids=["position-saved", "no-position"])
def test_a_plain_loader_resumed_mid_epoch_restarts_it(stored):
    violation = _one(stored, _resumed(0, 4, nxt=None, resumable=False, loader="DataLoader"))
    # Batches 0-5 served again: 0-3 were trained on (40 replayed), 6-9 never come (40 skipped).
    assert (violation.details["replayed"], violation.details["skipped"]) == (40, 40)
    assert "replay 40 samples already trained on and skip 40 samples never seen" in violation.message
    assert "(DataLoader) is not resumable" in violation.message and "4 of its 10 batches" in violation.message
    assert "make the train loader resumable" in violation.fix


def test_a_plain_loader_resumed_at_an_epoch_boundary_passes():
    plain = {"resumable": False, "loader": "DataLoader"}
    assert check_resume_position(_plain(0, 10), _resumed(1, 0, nxt=None, **plain)) == []
    assert check_resume_position(None, _resumed(2, 0, nxt=None, **plain)) == []


@pytest.mark.parametrize(
    ("change", "phrase", "fix"),
    [
        ({"shuffle": False}, "shuffle True -> False", "shuffle=True"),
        ({"seed": 1}, "seed 0 -> 1", "seed=0"),
    ],
)
def test_a_changed_shuffle_counts_the_samples_read_twice_and_never(change, phrase, fix):
    old, new = epoch_order(100, 0, 0), epoch_order(100, change.get("seed", 0), 0, change.get("shuffle", True))
    violation = _one(_ours(0, 30), _resumed(0, 3, nxt=_ours(0, 30, **change)))
    replayed = int(np.isin(new[30:], old[:30]).sum())
    assert violation.details["replayed"] == replayed == violation.details["skipped"] > 0
    assert phrase in violation.message and f"resume with {fix}" in violation.fix


def test_another_shuffle_algorithm_is_counted_about():
    stored = {**_ours(0, 30), "order": "0" * 16}  # an order this numpy does not make again
    violation = _one(stored, _resumed(0, 3, nxt=_ours(0, 30)))
    assert violation.details["exact"] is False and "replay about" in violation.message
    assert "another shuffle algorithm" in violation.message


def test_a_larger_global_batch_mid_epoch_skips_what_lightning_no_longer_counts():
    # 3 of 10 batches of 10 done; with batches of 20 Lightning runs 5 - 3 = 2 more: 40 of the 70 left.
    violation = _one(_ours(0, 30), _resumed(0, 3, batch=20, nxt=_ours(0, 30, batch=20)))
    assert (violation.details["replayed"], violation.details["skipped"]) == (0, 30)
    assert "the global batch changed from 10 to 20" in violation.message
    assert "global batch of 10" in violation.fix


def test_a_smaller_global_batch_or_a_new_epoch_loses_nothing():
    # Batches of 5 from sample 30: the loader runs out (14 batches) before Lightning's count (17).
    assert check_resume_position(_ours(0, 30), _resumed(0, 3, batch=5, nxt=_ours(0, 30, batch=5))) == []
    # At an epoch boundary any global batch starts the new epoch cleanly.
    assert check_resume_position(_ours(0, 100), _resumed(1, 0, batch=20, nxt=_ours(1, 0, batch=20))) == []


def test_a_restored_position_is_read_whatever_lightnings_epoch_counter_says():
    # Saved after fit() returned at max_steps: Lightning counts epoch 0 as over and starts epoch 1,
    # but the restored loader continues epoch 0 at sample 20 (Lightning's later epochs follow it).
    assert check_resume_position(_ours(0, 20), _resumed(1, 0, nxt=_ours(0, 20), restored=True)) == []
    # A whole epoch done: the restored loader starts the next one, whatever Lightning counts.
    assert check_resume_position(_ours(0, 100), _resumed(1, 0, nxt=_ours(1, 0), restored=True)) == []


def test_a_checkpoint_whose_epoch_lightning_counts_as_ended_skips_its_rest():
    # An unrestored loader follows Lightning's set_epoch: the rest of epoch 0 is never read.
    violation = _one(_ours(0, 20), _resumed(1, 0, nxt=_ours(0, 20)))
    assert (violation.details["replayed"], violation.details["skipped"]) == (0, 80)
    assert "counts epoch 0 as ended" in violation.message and "during the fit" in violation.fix


@pytest.mark.parametrize(
    ("stored_batches", "setting"),
    [(10, "leave limit_train_batches unset"), (8, "limit_train_batches=8")],
    ids=["whole-epochs-before", "limited-before"],
)
def test_a_shorter_epoch_at_resume_names_limit_train_batches_and_the_checkpoints_epoch(
    stored_batches, setting
):
    # The checkpoint's run read `stored_batches` an epoch; the resumed run stops each epoch after 6.
    stored = {**_ours(0, 30), "epoch_batches": stored_batches}
    violation = _one(stored, _resumed(0, 3, nxt=_ours(0, 30), epoch_batches=6, restored=True))
    assert (violation.details["replayed"], violation.details["skipped"]) == (0, stored_batches * 10 - 60)
    assert f"Lightning's epoch is 6 batches long in this run but was {stored_batches}" in violation.message
    assert "limit_train_batches" in violation.message and not violation.message.endswith(": ")
    assert f"resume with the checkpoint's epoch of {stored_batches} batches ({setting}" in violation.fix
    assert "resumable train loader" not in violation.fix  # the loader is resumable already


def test_other_data_is_left_to_resume_data_changed():
    assert check_resume_position(_ours(0, 30), _resumed(0, 3, nxt=_ours(0, 30, size=120))) == []


def test_the_stored_position_is_found_wherever_the_checkpoint_keeps_it():
    position = _ours(0, 30)
    loops = {"loops": {"fit_loop": {"state_dict": {"combined_loader": [{"x": 1}, position]}}}}
    assert (
        stored_position({"callbacks": {"OrderValidator{}": {"position": position}}}, "k", "OrderValidator")
        == position
    )
    assert stored_position({CHECKPOINT_KEY: {"position": position}}, "k", "OrderValidator") == position
    assert stored_position(loops, "k", "OrderValidator") == position
    assert stored_position({"callbacks": {"OrderValidator{}": {}}}, "k", "OrderValidator") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("epoch", -1), ("samples", "64"), ("samples", None), ("samples", -32), ("global_batch", 0)],
)
@pytest.mark.parametrize("where", ["validator", "top", "loader"])
def test_a_garbage_stored_position_is_one_checkpoint_error_naming_the_field(field, value, where):
    position = {**_ours(0, 30), field: value}
    checkpoint = {
        "validator": {"callbacks": {"OrderValidator{}": {"position": position}}},
        "top": {CHECKPOINT_KEY: {"position": position}},
        "loader": {"loops": {"fit_loop": {"state_dict": {"combined_loader": [position]}}}},
    }[where]
    with pytest.raises(CheckpointError) as caught:
        stored_position(checkpoint, "k", "OrderValidator")
    message = str(caught.value)
    assert f"data position has {field}={value!r}, expected a whole number" in message
    assert "Resume from an intact checkpoint" in message and "fit without ckpt_path" in message


def test_a_plain_loaders_unknown_counts_are_no_garbage():
    # A plain loader without a batch size saves samples=None; Lightning's epoch length may be unknown.
    plain = {**_plain(0, 4), "samples": None, "global_batch": None, "epoch_batches": None}
    assert stored_position({CHECKPOINT_KEY: {"position": plain}}, "k", "OrderValidator") == plain
    ours = {**_ours(0, 30), "epoch_batches": None}
    assert stored_position({CHECKPOINT_KEY: {"position": ours}}, "k", "OrderValidator") == ours

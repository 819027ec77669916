"""The validator's state: ``ValidatorState`` (where one run stands between its hooks, asked as
questions instead of flags) and the state a checkpoint keeps (key and format unchanged since the
validator became a package, so checkpoints saved before still resume)."""

from __future__ import annotations

import pytest

from lightning_order import STANDARD_PIPELINE, OrderValidator
from lightning_order.callbacks.validator.phases import (
    CheckpointSeen,
    Done,
    SavedState,
    ValidatorState,
    saved_state,
)


def test_a_fresh_state_is_no_resume_and_has_done_nothing():
    state = ValidatorState()
    assert not state.resuming and not state.resume_unchecked
    assert state.done == set() and state.seen == set()
    assert state.fingerprints == {} and state.dims == {} and state.observed == {} and state.evidence == {}
    assert state.trainer is None and state.guarded is None and state.stored_position is None


@pytest.mark.parametrize(
    ("seen", "done", "resuming", "resume_unchecked"),
    [
        # Lightning restored the callback's state, no file was read first: the check is still due.
        ({CheckpointSeen.STATE}, set(), True, True),
        ({CheckpointSeen.STATE}, {Done.RESUME_CHECKED}, True, False),
        # The file was read before the weights (and checked there): a resume, nothing left to check.
        ({CheckpointSeen.FILE}, {Done.RESUME_CHECKED}, True, False),
        ({CheckpointSeen.FILE, CheckpointSeen.STATE}, {Done.RESUME_CHECKED}, True, False),
        # Checks done on a fresh run make it no resume.
        (set(), {Done.MODEL_CHECKED, Done.EVALUATE_RECORDED}, False, False),
    ],
)
def test_resuming_and_resume_unchecked_follow_the_checkpoint_seen_and_the_checks_done(
    seen, done, resuming, resume_unchecked
):
    state = ValidatorState(seen=set(seen), done=set(done))
    assert state.resuming is resuming
    assert state.resume_unchecked is resume_unchecked


def test_states_share_no_containers():
    first, second = ValidatorState(), ValidatorState()
    first.seen.add(CheckpointSeen.STATE)
    first.done.add(Done.MODEL_CHECKED)
    first.observed["max_token_id"] = 3
    assert not second.seen and not second.done and not second.observed


def test_state_key_is_derived_from_the_pipeline_as_before_the_package():
    # Checkpoints saved before OrderValidator became a package keep their state under this key.
    from lightning_order import LM_PIPELINE
    from lightning_order.ledger import fingerprint

    for pipeline in (STANDARD_PIPELINE, LM_PIPELINE):
        expected = fingerprint([s.name for s in pipeline], repr(pipeline))[:12]
        assert OrderValidator(pipeline=pipeline).state_key == f"OrderValidator{{'pipeline': '{expected}'}}"


def test_a_saved_state_loads_and_saves_back_unchanged_through_torch(tmp_path):
    import torch

    saved = {
        "fingerprints": {"split": "s" * 32, "vocab": "v" * 32},
        "dims": {"vocab_size": 9, "num_classes": 2},
        "position": {"epoch": 1, "samples": 64, "global_batch": 8, "seed": 0},
    }
    path = tmp_path / "state.pt"
    torch.save(saved, path)
    validator = OrderValidator()
    validator.load_state_dict(torch.load(path, weights_only=True))
    assert validator.state_dict() == saved
    assert validator.fingerprints == saved["fingerprints"] and validator.position == saved["position"]
    torch.save(validator.state_dict(), tmp_path / "again.pt")
    assert torch.load(tmp_path / "again.pt", weights_only=True) == saved


def test_views_before_setup_are_empty_and_read_only():
    validator = OrderValidator()
    assert dict(validator.observed) == {} and dict(validator.evidence) == {}
    with pytest.raises(TypeError):
        validator.observed["max_token_id"] = 1  # type: ignore[index]


def test_saved_state_reads_back_the_content_sample_and_defaults_older_states() -> None:
    content = {"tokenizer": "t", "splits": {"train": {"length": 3, "hashes": [1, 2, 3]}}}
    saved = saved_state({"fingerprints": {}, "dims": {"vocab_size": 9}, "content": content})
    assert saved == SavedState({}, {"vocab_size": 9}, None, content)
    assert saved_state({}).content == {}

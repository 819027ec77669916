"""``ValidatorState``: where one run of the validator stands, asked as questions instead of flags."""

from __future__ import annotations

import pytest

from lightning_order.callbacks.validator.state import CheckpointSeen, Done, ValidatorState


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

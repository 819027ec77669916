"""lightning_order/callbacks/validator/phases.py: what one run knows, a phase's evidence, a phase run through the registry.

What a datamodule says about its data, and which pipeline judges its ledger.

``run_phase``: a phase's registered checks, one all-gather whatever is
registered, every rank's gathered result handed to the checks that read the ranks, a fatal check's
finding marked fatal. Ranks are simulated by an all-gather that returns two copies (no process group).

The validator's state: ``ValidatorState`` (where one run stands between its hooks, asked as
questions instead of flags) and the state a checkpoint keeps (key and format unchanged since the
validator became a package, so checkpoints saved before still resume).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lightning_order import (
    LM_PIPELINE,
    STANDARD_PIPELINE,
    CheckEvidence,
    OrderValidator,
    Pipeline,
    Step,
    StepLedger,
    Violation,
    register_check,
    unregister_check,
)
from lightning_order.callbacks.validator import phases
from lightning_order.callbacks.validator.phases import (
    CheckpointSeen,
    Done,
    SavedState,
    ValidatorState,
    data_dims,
    saved_state,
)
from lightning_order.checks.registry import Phase
from lightning_order.recorder import datamodule_ledger, ledger_pipeline

OWN = Pipeline([Step("load", (), "source"), Step("clean", ("load",), "rowwise")])


@pytest.mark.parametrize(
    ("dm_pipeline", "recorded", "configured", "expected"),
    [
        (None, None, STANDARD_PIPELINE, STANDARD_PIPELINE),  # nothing says otherwise: the default
        (LM_PIPELINE, None, STANDARD_PIPELINE, LM_PIPELINE),  # the datamodule's own, one of ours
        (OWN, None, STANDARD_PIPELINE, OWN),  # a user's own pipeline on their datamodule
        (None, "lm", STANDARD_PIPELINE, LM_PIPELINE),  # the name the ledger records
        (None, "no-such-pipeline", STANDARD_PIPELINE, STANDARD_PIPELINE),  # unknown: the configured one
        (LM_PIPELINE, "lm", OWN, OWN),  # configured by the user: kept
    ],
    ids=["default", "datamodule-ours", "datamodule-own", "ledger-name", "unknown-name", "configured"],
)
def test_the_pipeline_that_judges_a_ledger(dm_pipeline, recorded, configured, expected) -> None:
    ledger = StepLedger(info={"pipeline": recorded} if recorded else {})
    dm = SimpleNamespace(ledger=ledger, **({"pipeline": dm_pipeline} if dm_pipeline is not None else {}))
    assert ledger_pipeline(dm, datamodule_ledger(dm), configured) is expected


def test_a_datamodule_without_a_ledger_or_dims() -> None:
    dm = SimpleNamespace(ledger="not a ledger", dims={"vocab_size": 5, "num_classes": None})
    assert datamodule_ledger(dm) is None and datamodule_ledger(None) is None
    assert data_dims(dm) == {"vocab_size": 5} and data_dims(None) == {}
    assert ledger_pipeline(None, None) is STANDARD_PIPELINE


@pytest.fixture
def two_ranks(monkeypatch):
    """An all-gather as two ranks would answer it (rank 1 holds what rank 0 holds, ``rank`` set to 1)."""
    calls = []

    def all_gather(trainer, obj):
        calls.append(obj)
        other = {**obj, "ranks": {name: {**value, "rank": 1} for name, value in obj["ranks"].items()}}
        return [obj, other]

    monkeypatch.setattr(phases, "all_gather", all_gather)
    return calls


@pytest.fixture
def checks(monkeypatch):
    """Registers checks for the test; the phase runs these alone (whatever else is registered for it)."""
    names = []
    registered = phases.registered_checks
    monkeypatch.setattr(
        phases, "registered_checks", lambda phase: [c for c in registered(phase) if c.name in names]
    )

    def add(name, judge, **kwargs):
        register_check(name, judge, **kwargs)
        names.append(name)

    yield add
    for name in names:
        unregister_check(name)


def test_a_phase_is_one_all_gather_and_rank_checks_see_every_rank(two_ranks, checks):
    seen = {}

    def judge_ranks(evidence):
        seen["ranks"] = list(evidence.ranks)
        return []

    checks(
        "test-local",
        lambda ev: [Violation("rank-mismatch", ("shard",), f"local {ev.gathered}")],
        phase="step-one",
        reads=["step-one"],
        gather=lambda trainer, ev: ev.step_one["value"],
    )
    checks(
        "test-ranks",
        judge_ranks,
        phase="step-one",
        reads=["ranks"],
        gather=lambda trainer, ev: {"rank": 0, "rows": 3},
        facts=lambda own, ranks: {"test-ranks": len(ranks)},
    )
    trainer = SimpleNamespace(world_size=2)
    evidence = CheckEvidence(phase=Phase.STEP_ONE, world_size=2, step_one={"value": 7})
    result = phases.run_phase(trainer, Phase.STEP_ONE, evidence)
    assert len(two_ranks) == 1  # one collective for the phase, whatever is registered
    assert seen["ranks"] == [{"rank": 0, "rows": 3}, {"rank": 1, "rows": 3}]
    assert [v.message for v in result.violations] == ["local 7"]  # both ranks said it: agreed once
    assert result.facts == {"test-ranks": 2} and not result.fatal
    assert result.checks == ["test-local", "test-ranks"]


def test_a_fatal_checks_finding_is_fatal_on_every_rank(two_ranks, checks):
    checks(
        "test-fatal",
        lambda ev: [Violation("resume-position", ("train",), "cannot continue")],
        phase="step-one",
        fatal=True,
    )
    result = phases.run_phase(
        SimpleNamespace(world_size=2), Phase.STEP_ONE, CheckEvidence(phase=Phase.STEP_ONE)
    )
    assert result.fatal and result.violations[0].rule == "resume-position"
    assert len(two_ranks) == 1 and two_ranks[0]["fatal"] is True


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

"""``run_phase`` (callbacks.validator.gather): a phase's registered checks, one all-gather whatever is
registered, every rank's gathered result handed to the checks that read the ranks, a fatal check's
finding marked fatal. Ranks are simulated by an all-gather that returns two copies (no process group)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lightning_order import CheckEvidence, Violation, register_check, unregister_check
from lightning_order.callbacks.validator import phases as gather
from lightning_order.checks.registry import Phase


@pytest.fixture
def two_ranks(monkeypatch):
    """An all-gather as two ranks would answer it (rank 1 holds what rank 0 holds, ``rank`` set to 1)."""
    calls = []

    def all_gather(trainer, obj):
        calls.append(obj)
        other = {**obj, "ranks": {name: {**value, "rank": 1} for name, value in obj["ranks"].items()}}
        return [obj, other]

    monkeypatch.setattr(gather, "all_gather", all_gather)
    return calls


@pytest.fixture
def checks(monkeypatch):
    """Registers checks for the test; the phase runs these alone (whatever else is registered for it)."""
    names = []
    registered = gather.registered_checks
    monkeypatch.setattr(
        gather, "registered_checks", lambda phase: [c for c in registered(phase) if c.name in names]
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
    result = gather.run_phase(trainer, Phase.STEP_ONE, evidence)
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
    result = gather.run_phase(
        SimpleNamespace(world_size=2), Phase.STEP_ONE, CheckEvidence(phase=Phase.STEP_ONE)
    )
    assert result.fatal and result.violations[0].rule == "resume-position"
    assert len(two_ranks) == 1 and two_ranks[0]["fatal"] is True

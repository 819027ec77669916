"""The check registry (``lightning_order.checks.registry``): what is registered, when it runs, what
it may read, and what a registration refuses (a name taken, an unknown phase, evidence or rule code,
a rule code redefined). Through ``Trainer.fit``: tests/integration/test_check_registry.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lightning_order
import lightning_order.callbacks  # registers the built-in checks
from lightning_order import (
    RULES,
    CheckEvidence,
    OrderValidator,
    Rule,
    SymptomMonitor,
    Violation,
    register_check,
    unregister_check,
)
from lightning_order.checks.registry import CheckReport, EvidenceKind, Phase, check_named, registered_checks

_RULE = Rule("a rule of a test", "nothing a user sees", "nothing to do")


def _nothing(evidence: CheckEvidence) -> list[Violation]:
    return []


@pytest.mark.parametrize(
    ("phase", "names"),
    [
        (Phase.SETUP, ["order", "train-val-overlap", "label-encoding", "rank-data"]),
        (Phase.RESUME, ["resume-data", "stored-position"]),
        (Phase.FIT_START, ["model-dims", "lm-batches", "resume-data", "loader-states"]),
        (Phase.TRAIN_START, ["resume-position", "ranks-read-same-data", "resume-data"]),
    ],
)
def test_the_built_in_checks_run_in_their_phase_in_a_fixed_order(phase, names):
    built_in = [c for c in registered_checks(phase) if c.name in names]
    assert [c.name for c in built_in] == names and all(c.order < 1000 for c in built_in)


def test_a_check_registers_runs_after_the_built_ins_and_unregisters_with_its_rule():
    before = dict(RULES)
    check = register_check(
        "test-own", _nothing, phase="setup", reads=["ledger"], rules={"test-own-rule": _RULE}
    )
    try:
        assert check_named("test-own") is check and RULES["test-own-rule"] == _RULE
        assert registered_checks("setup")[-1] is check  # a user's check runs after the built-in ones
        assert check.reads == frozenset({EvidenceKind.LEDGER}) and check.phases == (Phase.SETUP,)
        Violation("test-own-rule", ("load",), "its own code is a known rule while it is registered")
    finally:
        assert unregister_check("test-own") is check
    assert check_named("test-own") is None and RULES == before
    with pytest.raises(ValueError, match="unknown rule code"):
        Violation("test-own-rule", ("load",), "gone with its check")
    with pytest.raises(KeyError, match="no check named 'test-own'"):
        unregister_check("test-own")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": "order"}, ValueError, "already registered"),
        ({"phase": "step-two"}, ValueError, "unknown phase"),
        ({"reads": ["gradients"]}, ValueError, "unknown evidence"),
        ({"rules": ["no-such-rule"]}, ValueError, "unknown rule code"),
        ({"rules": {"rank-mismatch": _RULE}}, ValueError, "already defined with another meaning"),
        ({"rules": {"test-own-rule": "a string"}}, TypeError, "must be a lightning_order.rules.Rule"),
        ({"judge": "not callable"}, TypeError, "must be callable"),
    ],
)
def test_a_registration_that_cannot_be_honoured_is_refused_and_changes_nothing(kwargs, error, match):
    before, checks = dict(RULES), registered_checks()
    arguments = {"name": "test-refused", "judge": _nothing, "phase": "setup", **kwargs}
    with pytest.raises(error, match=match):
        register_check(arguments.pop("name"), arguments.pop("judge"), **arguments)
    assert RULES == before and registered_checks() == checks


def test_a_check_sees_only_the_evidence_it_declares():
    full = CheckEvidence(
        phase=Phase.FIT_START,
        settings={"sample_rows": 8},
        datamodule=object(),
        ledger="a ledger",
        dims={"vocab_size": 9},
        samples={"observed": {"max_token_id": 3}},
        model={"embedding_rows": 9},
        checkpoint={"fingerprints": {}},
        ranks=({"rank": 0},),
        step_one={"ids": []},
    )
    model_only = full.only([EvidenceKind.MODEL])
    assert model_only.model == {"embedding_rows": 9} and model_only.settings == {"sample_rows": 8}
    assert (model_only.ledger, model_only.datamodule, model_only.checkpoint, model_only.step_one) == (
        None,
    ) * 4
    assert model_only.dims == {} and model_only.samples == {} and model_only.ranks == ()
    assert full.only(["ledger", "checkpoint"]).checkpoint == {"fingerprints": {}}
    assert full.only(["samples"]).datamodule is full.datamodule


def test_the_monitor_imports_nothing_of_the_validator():
    monitor = Path(lightning_order.__file__).parent / "callbacks" / "monitor"
    imported = set()
    for path in monitor.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-level imports too
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
    assert imported and not {m for m in imported if m.startswith("lightning_order.callbacks.validator")}
    assert "lightning_order.checks.registry" in imported  # it reads the validator through the registry
    assert isinstance(OrderValidator(), CheckReport) and not isinstance(SymptomMonitor(), CheckReport)


def test_the_registry_imports_no_spec_or_pipeline():
    source = Path(lightning_order.__file__).parent / "checks" / "registry.py"
    imported = {
        node.module
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lightning_order")
    }
    assert imported == {"lightning_order.rules"}

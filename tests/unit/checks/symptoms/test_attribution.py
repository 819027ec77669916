"""From symptom to cause: an order error is named only where the run's facts separate it."""

from __future__ import annotations

import pytest

from lightning_order.checks.symptoms import (
    Diagnosis,
    RunFacts,
    attribute,
    detect_data_starvation,
    detect_early_oscillation,
    detect_plateau,
    detect_train_val_gap,
)

UNK = detect_plateau([1.4] * 25, unk_rate=0.01)
LEAK = detect_train_val_gap([1.0, 0.4, 0.2], [0.9, 0.35, 0.15])
OSCILLATION = detect_early_oscillation([2.0 - 0.01 * i + (0.9 if i % 2 else -0.9) for i in range(60)])


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (RunFacts.of(vocabulary=False), "silent"),  # no vocabulary: token ids are not words
        (RunFacts.of(vocabulary=True, vocab_kind="word"), "silent"),  # a capped word-level vocabulary
        (RunFacts.of(ledger_steps=["clean", "split", "build_vocab"], vocabulary=True), "silent"),
        (RunFacts.of(vocabulary=True, vocab_kind="subword"), "vocab-before-clean"),
        (RunFacts.of(rules=["vocab-before-clean"], ledger_steps=["build_vocab"]), "vocab-before-clean"),
    ],
)
def test_unknown_tokens_are_an_order_error_only_on_separating_evidence(facts, expected) -> None:
    found = attribute(UNK, facts)
    if expected == "silent":
        assert found is None
    else:
        assert found.suspected_rule == expected and found.evidence["attribution"]


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (RunFacts.of(), "train-val-overlap"),  # no validator: the listed rule, both candidates in evidence
        (RunFacts.of(validator=True, rules=["train-val-overlap"]), "train-val-overlap"),
        (RunFacts.of(validator=True), "fit-before-split"),  # overlap checked and ruled out
        (RunFacts.of(validator=True, rules=["fit-before-split"]), "fit-before-split"),
    ],
)
def test_leakage_is_narrowed_by_what_the_validator_found(facts, rule) -> None:
    found = attribute(LEAK, facts)
    assert found.suspected_rule == rule
    assert set(found.evidence["candidates"]) == {"train-val-overlap", "fit-before-split"}


def test_oscillation_names_per_shard_statistics_only_under_ddp_with_the_ledger() -> None:
    assert attribute(OSCILLATION, RunFacts.of()).suspected_rule is None
    assert attribute(OSCILLATION, RunFacts.of(world_size=2)).suspected_rule is None
    ddp = RunFacts.of(world_size=2, rules=["shard-before-normalize"])
    assert attribute(OSCILLATION, ddp).suspected_rule == "shard-before-normalize"


def test_loader_problems_name_no_order_error() -> None:
    starved = detect_data_starvation([0.06] * 30, [0.01] * 30)
    assert starved.suspected_rule is None
    assert attribute(starved, RunFacts.of(rules=["out-of-order"])).suspected_rule is None
    assert "not an order error" in starved.describe()


def test_rank_divergence_follows_the_validator() -> None:
    diagnosis = Diagnosis("rank-divergence", 30, "shard-before-normalize", {"trigger": "losses"})
    assert attribute(diagnosis, RunFacts.of(rules=["rank-mismatch"])).suspected_rule == "rank-mismatch"
    fitted_once = RunFacts.of(ledger_steps=["fit_features", "shard"])
    assert attribute(diagnosis, fitted_once).suspected_rule is None
    assert attribute(diagnosis, RunFacts.of()).suspected_rule == "shard-before-normalize"


def test_a_diagnosis_without_a_rule_round_trips() -> None:
    diagnosis = Diagnosis("plateau", 80, None, {"trigger": "stall"}, "not learning")
    assert Diagnosis.from_dict(diagnosis.to_dict()) == diagnosis
    assert not diagnosis.names_order_error and "none" in diagnosis.describe()

"""From symptom to cause: an order error is named only where the run's facts separate it, and never
where the run's evidence rules it out (issue 27)."""

from __future__ import annotations

import itertools

import pytest

from lightning_order.checks.symptoms import (
    Diagnosis,
    RunFacts,
    attribute,
    detect_data_starvation,
    detect_early_oscillation,
    detect_label_leak,
    detect_plateau,
    detect_train_val_gap,
    ruled_out,
)

UNK = detect_plateau([1.4] * 25, unk_rate=0.01)
LEAK = detect_train_val_gap([1.0, 0.4, 0.2], [0.9, 0.35, 0.15])
OSCILLATION = detect_early_oscillation([2.0 - 0.01 * i + (0.9 if i % 2 else -0.9) for i in range(60)])
LABEL_LEAK = detect_label_leak([{"name": "te_0", "ratio": 9.0}], train_loss=0.5, val_loss=0.4)
DIVERGED = Diagnosis("rank-divergence", 30, "shard-before-normalize", {"trigger": "losses"})
SHIFTED = Diagnosis("rank-divergence", 50, "shard-before-normalize", {"trigger": "inputs"})

#: What the validator proves about an OrderedDataModule run in the mandated order (the issue's
#: reproduction): fitted steps on the train split, a split by key hash, key hashes compared,
#: the label-encoding check's verdict clean.
PROVEN = RunFacts.of(
    validator=True,
    ledger_steps=["clean", "split", "fit_features", "build_vocab", "encode", "shard"],
    vocabulary=True,
    vocab_kind="subword",
    fitted_on_train=True,
    split_by_key=True,
    overlap_check="key-hash",
    label_checked=True,
)


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


# -- the evidence rules causes out -------------------------------------------------------------
@pytest.mark.parametrize(
    ("rule", "facts", "excluded"),
    [
        # fit-before-split: the ledger's fitted steps and the label-encoding verdict, together.
        ("fit-before-split", RunFacts.of(fitted_on_train=True, label_checked=True), True),
        ("fit-before-split", RunFacts.of(fitted_on_train=True), False),  # input-file columns unchecked
        ("fit-before-split", RunFacts.of(label_checked=True), False),  # no ledger proof
        ("fit-before-split", RunFacts.of(fitted_on_train=False, label_checked=True), False),
        (
            "fit-before-split",
            RunFacts.of(fitted_on_train=True, label_checked=True, label_encoded=[{"name": "te_0"}]),
            False,
        ),
        (
            "fit-before-split",
            RunFacts.of(rules=["fit-before-split"], fitted_on_train=True, label_checked=True),
            False,
        ),
        # train-val-overlap: exact overlap evidence, or a split by key hash.
        ("train-val-overlap", RunFacts.of(overlap_check="key-hash"), True),
        ("train-val-overlap", RunFacts.of(overlap_check="content"), True),
        ("train-val-overlap", RunFacts.of(overlap_check="content-sample"), False),
        ("train-val-overlap", RunFacts.of(overlap_check="token-stream"), True),
        ("train-val-overlap", RunFacts.of(overlap_check="rows-sample"), False),
        ("train-val-overlap", RunFacts.of(split_by_key=True), True),
        ("train-val-overlap", RunFacts.of(split_by_key=False), False),
        ("train-val-overlap", RunFacts.of(rules=["train-val-overlap"], overlap_check="key-hash"), False),
        # shard-before-normalize: statistics fitted once on the train split.
        ("shard-before-normalize", RunFacts.of(fitted_on_train=True), True),
        ("shard-before-normalize", RunFacts.of(ledger_steps=["fit_features", "shard"]), True),
        ("shard-before-normalize", RunFacts.of(ledger_steps=["shard"]), False),
        (
            "shard-before-normalize",
            RunFacts.of(rules=["shard-before-normalize"], fitted_on_train=True),
            False,
        ),
        # vocab-before-clean: the ledger's vocabulary, built in order.
        ("vocab-before-clean", RunFacts.of(ledger_steps=["clean", "build_vocab"]), True),
        ("vocab-before-clean", RunFacts.of(vocab_kind="subword"), False),
        (
            "vocab-before-clean",
            RunFacts.of(rules=["vocab-before-clean"], ledger_steps=["build_vocab"]),
            False,
        ),
        # rank-mismatch: the validator compared every rank's data.
        ("rank-mismatch", RunFacts.of(validator=True, world_size=2), True),
        ("rank-mismatch", RunFacts.of(validator=True), False),
        ("rank-mismatch", RunFacts.of(validator=True, world_size=2, rules=["rank-mismatch"]), False),
    ],
)
def test_each_rule_is_ruled_out_only_by_evidence_that_excludes_it(rule, facts, excluded) -> None:
    found = ruled_out(facts)
    assert (rule in found) == excluded
    if excluded:
        assert found[rule]  # says which evidence


def test_the_issue_run_rules_out_every_order_cause_of_leakage() -> None:
    # Val below train on a run whose ledger and checks prove the split: a symptom, no order error.
    found = attribute(LEAK, PROVEN)
    assert found is not None and found.symptom == "train-val-gap" and found.suspected_rule is None
    assert set(found.evidence["ruled_out"]) == {"train-val-overlap", "fit-before-split"}
    assert found.evidence["ratios"] == LEAK.evidence["ratios"]  # what it measured, kept
    text = found.describe()
    assert "likely order error: none (the run's evidence rules out" in text
    assert "validation labels reached training" not in text  # no cause the evidence excludes


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (RunFacts.of(validator=True, overlap_check="key-hash"), "fit-before-split"),  # overlap out
        # Fitted steps proven, overlap only sampled (it can miss a leak): overlap is the cause left.
        (
            RunFacts.of(
                validator=True, overlap_check="rows-sample", fitted_on_train=True, label_checked=True
            ),
            "train-val-overlap",
        ),
        (RunFacts.of(fitted_on_train=True, label_checked=True), "train-val-overlap"),  # the cause left
        (RunFacts.of(split_by_key=True, fitted_on_train=True, label_checked=True), None),
    ],
)
def test_leakage_names_only_a_cause_the_evidence_leaves(facts, rule) -> None:
    assert attribute(LEAK, facts).suspected_rule == rule


def test_a_label_encoding_found_in_the_data_is_named_whatever_the_ledger_proves() -> None:
    # The lab's target-encoding case: computed before the pipeline, so the ledger is clean.
    facts = RunFacts.of(
        validator=True,
        rules=["fit-before-split"],
        fitted_on_train=True,
        split_by_key=True,
        overlap_check="key-hash",
        label_checked=True,
        label_encoded=[{"name": "te_0", "ratio": 9.0}],
    )
    assert attribute(LABEL_LEAK, facts).suspected_rule == "fit-before-split"


def test_ranks_that_share_statistics_name_no_order_error() -> None:
    for diagnosis in (DIVERGED, SHIFTED):
        found = attribute(diagnosis, RunFacts.of(world_size=2, fitted_on_train=True))
        assert found.suspected_rule is None and "shard-before-normalize" in found.evidence["ruled_out"]


SYMPTOM_DIAGNOSES = [UNK, LEAK, OSCILLATION, LABEL_LEAK, DIVERGED, SHIFTED]
EVIDENCE = {
    "rules": [
        (),
        ("fit-before-split",),
        ("train-val-overlap",),
        ("shard-before-normalize",),
        ("rank-mismatch",),
    ],
    "world_size": [1, 2],
    "fitted_on_train": [None, True, False],
    "split_by_key": [None, True],
    "overlap_check": [None, "key-hash", "rows-sample"],
    "label_checked": [False, True],
}


@pytest.mark.parametrize(
    "diagnosis",
    SYMPTOM_DIAGNOSES,
    ids=lambda d: f"{d.symptom}-{d.evidence.get('trigger') or d.evidence.get('kind')}",
)
def test_no_diagnosis_names_a_rule_its_evidence_rules_out(diagnosis: Diagnosis) -> None:
    # Every symptom that can name a rule, against every combination of the kinds of evidence.
    for values in itertools.product(*EVIDENCE.values()):
        facts = RunFacts.of(
            validator=True, ledger_steps=["split", "build_vocab"], **dict(zip(EVIDENCE, values))
        )
        found = attribute(diagnosis, facts)
        if found is not None and found.suspected_rule is not None:
            assert found.suspected_rule not in ruled_out(facts), (diagnosis.symptom, facts)


def test_an_input_shift_the_validator_saw_alike_on_every_rank_is_no_symptom() -> None:
    # label_ddp's sound run: the validator compared the validation rows' floats on both ranks.
    alike = RunFacts.of(world_size=2, validator=True, same_rows_floats=True)
    assert attribute(SHIFTED, alike) is None
    assert "shard-before-normalize" in ruled_out(alike)
    # A loss divergence is still reported, with the per-shard cause excluded.
    found = attribute(DIVERGED, alike)
    assert found is not None and found.suspected_rule != "shard-before-normalize"
    # Without that comparison the shift still names per-shard statistics.
    assert attribute(SHIFTED, RunFacts.of(world_size=2, validator=True)).suspected_rule == (
        "shard-before-normalize"
    )

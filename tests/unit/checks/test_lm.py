"""checks/lm.py: pure functions of plain evidence, one case per finding and the clean case."""

from __future__ import annotations

import pytest

from lightning_order import LM_PIPELINE, RULES, StepLedger
from lightning_order.checks.lm import check_lm, check_lm_ledger, check_lm_records, lm_ledger_evidence
from lightning_order.pipelines import PIPELINES

CLEAN = {
    "tokenizer_size": 1000,
    "tokenizer_fp": "a" * 32,
    "recorded_vocab_fp": "a" * 32,
    "recorded_vocab_size": 1000,
    "recorded_padded": 1024,
    "embedding_rows": 1024,
    "head_rows": 1024,
    "max_token_id": 999,
    "eos_id": 0,
    "sampled_eos": 260,
    "sampled_tokens": 66_000,
    "recorded_eos_rate": 0.004,
    "encode_eos": True,
    "documents": 1356,
    "eos_tokens": 1356,
}


@pytest.mark.parametrize("rule", ["dedup-after-split", "vocab-changed-after-init", "pack-without-eos"])
def test_new_rule_codes_exist(rule: str) -> None:
    assert RULES[rule].fix and RULES[rule].symptom


def test_clean_evidence_has_no_violation() -> None:
    assert check_lm(CLEAN) == []
    assert check_lm({}) == []  # no evidence, no finding


@pytest.mark.parametrize(
    ("change", "rule", "words"),
    [
        ({"tokenizer_fp": "b" * 32, "tokenizer_size": 1001}, "vocab-changed-after-init", "size 1000 -> 1001"),
        ({"tokenizer_size": 1030}, "vocab-changed-after-init", "index out of range"),
        ({"max_token_id": 1024}, "vocab-changed-after-init", "token id 1024"),
        ({"head_rows": 1088}, "init-before-data", "output head has 1088 rows"),
        ({"encode_eos": False, "eos_tokens": 0}, "pack-without-eos", "eos=False"),
        ({"sampled_eos": 0}, "pack-without-eos", "hold 0 end-of-text ids"),
        ({"sampled_eos": 40}, "pack-without-eos", "not the blocks the ledger describes"),
        ({"sampled_eos": 2000}, "pack-without-eos", "not the blocks the ledger describes"),
        ({"straddling": 3}, "dedup-after-split", "3 near-duplicate document pairs"),
    ],
)
def test_each_finding(change: dict, rule: str, words: str) -> None:
    found = check_lm({**CLEAN, **change})
    assert [v.rule for v in found] == [rule]
    assert words in found[0].message


@pytest.mark.parametrize("seen", [120, 260, 500])
def test_sampled_eos_rate_within_the_band_passes(seen: int) -> None:
    assert check_lm({**CLEAN, "sampled_eos": seen}) == []


def test_without_a_recorded_rate_only_a_large_sample_without_eos_counts() -> None:
    unrecorded = {k: v for k, v in CLEAN.items() if k != "recorded_eos_rate"}
    assert check_lm({**unrecorded, "sampled_eos": 0, "sampled_tokens": 10_000}) == []
    assert [v.rule for v in check_lm({**unrecorded, "sampled_eos": 0, "sampled_tokens": 40_000})] == [
        "pack-without-eos"
    ]


def test_ledger_check_alone() -> None:
    assert check_lm_ledger({"documents": 5, "eos_tokens": 4})[0].rule == "pack-without-eos"
    assert check_lm_ledger({"documents": 5, "eos_tokens": 5, "straddling": 0}) == []


def _lm_ledger(order: list[str]) -> StepLedger:
    ledger = StepLedger()
    previous = None
    for step in order:
        inputs = {previous: ledger.latest(previous).output} if previous else {}
        parts = {"train": f"{step}-t", "val": f"{step}-v"} if step == "split" else {}
        ledger.record(step, inputs=inputs, parts=parts)
        previous = step
    return ledger


@pytest.mark.parametrize(
    ("order", "rule"),
    [
        (["load", "clean", "split", "dedup"], "dedup-after-split"),
        (
            ["load", "clean", "dedup", "split", "encode", "pack", "init_model", "build_vocab"],
            "vocab-changed-after-init",
        ),
        (["load", "split", "build_vocab", "clean"], "vocab-before-clean"),
    ],
)
def test_lm_pipeline_names_its_order_errors(order: list[str], rule: str) -> None:
    assert rule in {v.rule for v in LM_PIPELINE.check(_lm_ledger(order))}


def test_lm_rules_stay_in_the_lm_pipeline() -> None:
    from lightning_order import STANDARD_PIPELINE

    assert STANDARD_PIPELINE.rule_for("init_model", "build_vocab") == "init-before-data"
    assert LM_PIPELINE.rule_for("init_model", "build_vocab") == "vocab-changed-after-init"
    extended = LM_PIPELINE.extend()
    assert extended.rule_for("split", "dedup") == "dedup-after-split"


def test_the_ledger_evidence_is_read_once_for_validator_and_command_line() -> None:
    ledger = _lm_ledger(["load", "clean", "dedup", "split", "build_vocab", "encode", "pack"])
    ledger.info["dims"] = {"vocab_size": 300, "padded_vocab_size": 320, "block_size": 32}
    assert lm_ledger_evidence(ledger) == {
        "recorded_vocab_fp": ledger.latest("build_vocab").output,
        "recorded_vocab_size": None,
        "recorded_padded": 320,
    }
    assert check_lm_records(ledger) == [] == PIPELINES["lm"].check(ledger)
    # encode without end-of-text tokens, dedup after the split: both read off the records.
    bad = StepLedger(info={"pipeline": "lm"})
    for step, params, stats in [
        ("load", {}, {}),
        ("clean", {}, {}),
        ("split", {}, {}),
        ("dedup", {}, {"straddling": 3}),
        ("encode", {"eos": False}, {"documents": 10, "eos_tokens": 0}),
    ]:
        bad.record(step, params=params, stats=stats)
    evidence = lm_ledger_evidence(bad)
    assert evidence == {"encode_eos": False, "documents": 10, "eos_tokens": 0, "straddling": 3}
    assert [v.rule for v in check_lm_records(bad)] == ["pack-without-eos", "dedup-after-split"]
    assert check_lm_records(bad) == check_lm_ledger(evidence)
    assert {"pack-without-eos", "dedup-after-split"} <= {v.rule for v in PIPELINES["lm"].check(bad)}


def test_a_tokenizer_changed_since_the_validators_setup_is_a_vocab_change() -> None:
    zero_glue = {"tokenizer_size": 513, "tokenizer_fp": "b" * 32, "embedding_rows": 600}
    (v,) = check_lm({**zero_glue, "setup_tokenizer_fp": "a" * 32})
    assert v.rule == "vocab-changed-after-init" and "between the validator's setup" in v.message
    assert check_lm({**zero_glue, "setup_tokenizer_fp": "b" * 32}) == []
    (hf,) = check_lm({**zero_glue, "setup_tokenizer_fp": "a" * 32, "hf_model": True})
    assert "resize_token_embeddings" in hf.fix

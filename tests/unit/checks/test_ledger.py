"""Pure ledger checks on hand-built ledgers: each order error gives its rule code, the right order none."""

from __future__ import annotations

import pytest

from lightning_order.checks import check_init_order, check_ledger
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE

DATA_ORDER = ["load", "clean", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"]
DIMS = {"vocab_size": 500, "num_features": 5, "num_classes": 4, "max_length": 32}


def build(order: list[str], init_params: dict | None = None) -> StepLedger:
    """Records ``order`` the way a datamodule would: inputs are the latest outputs of the requirements,
    fitted steps learn from the split's train part if there is one, else from a shard, else from all rows."""
    ledger = StepLedger(info={"dims": dict(DIMS)})
    data_fp = None
    for step in order:
        inputs = {r: ledger.latest(r).output for r in STANDARD_PIPELINE[step].requires if ledger.has(r)}
        kwargs: dict = {}
        if step == "split":
            kwargs["parts"] = {"train": "train-part", "val": "val-part"}
        if STANDARD_PIPELINE[step].kind == "fitted":
            split, shard = ledger.latest("split"), ledger.latest("shard")
            kwargs["fitted_on"] = split.parts["train"] if split else shard.output if shard else data_fp
            if split:
                inputs["split"] = split.parts["train"]
        if step == "init_model":
            kwargs["params"] = dict(init_params or DIMS)
        record = ledger.record(step, inputs=inputs, **kwargs)
        if step in ("load", "clean", "engineer_features"):
            data_fp = record.output
    return ledger


FULL = [*DATA_ORDER, "init_model", "configure_optimizers", "train", "evaluate"]


@pytest.mark.parametrize("upto", range(1, len(FULL) + 1))
def test_correct_order_has_no_violation_at_any_point(upto):
    assert check_ledger(build(FULL[:upto])) == []
    assert check_init_order(build(FULL[:upto])) == []


def _move(order: list[str], step: str, before: str) -> list[str]:
    out = [s for s in order if s != step]
    out.insert(out.index(before), step)
    return out


@pytest.mark.parametrize(
    ("order", "rule"),
    [
        (_move(DATA_ORDER, "build_vocab", "clean"), "vocab-before-clean"),
        (_move(DATA_ORDER, "fit_features", "split"), "fit-before-split"),
        ([s for s in DATA_ORDER if s != "fit_features"] + ["fit_features"], "shard-before-normalize"),
        (_move(FULL, "init_model", "encode")[:-3], "init-before-data"),
        (_move(DATA_ORDER, "engineer_features", "clean"), "out-of-order"),
        ([s for s in DATA_ORDER if s != "engineer_features"], "missing-step"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_wrong_orders_give_their_rule(order, rule):
    rules = {v.rule for v in check_ledger(build(order))}
    assert rule in rules, rules


def test_step_rerun_upstream_is_stale_input():
    ledger = build(DATA_ORDER)
    ledger.record("clean", inputs={"load": ledger.latest("load").output}, params={"lowercase": False})
    assert "stale-input" in {v.rule for v in check_ledger(ledger)}


def test_model_built_with_other_dims_is_init_before_data():
    ledger = build(FULL[:10], init_params={**DIMS, "vocab_size": 100})
    (violation,) = check_init_order(ledger)
    assert violation.rule == "init-before-data"
    assert "vocab_size=100 (data: 500)" in violation.message
    assert [v.rule for v in check_ledger(ledger)] == ["init-before-data"]


def test_data_encoded_again_after_the_model_was_built_is_init_before_data():
    ledger = build(FULL[:9])
    ledger.record("encode", inputs={"fit_features": ledger.latest("fit_features").output})
    assert [v.rule for v in check_init_order(ledger)] == ["init-before-data"]


def test_check_ledger_takes_plain_records_and_a_custom_pipeline():
    from lightning_order.order import Step

    pipeline = STANDARD_PIPELINE.extend(Step("dedupe", ("clean",), "rowwise"), before="split")
    order = [*DATA_ORDER[:2], "dedupe", *DATA_ORDER[2:]]
    ledger = StepLedger()
    for step in order:
        inputs = {r: ledger.latest(r).output for r in pipeline[step].requires if ledger.has(r)}
        kwargs = {"parts": {"train": "t", "val": "v"}} if step == "split" else {}
        if pipeline[step].kind == "fitted":
            kwargs, inputs = {"fitted_on": "t"}, {**inputs, "split": "t"}
        ledger.record(step, inputs=inputs, **kwargs)
    assert check_ledger(list(ledger), pipeline) == []
    assert {v.rule for v in check_ledger(list(ledger))} == set()  # unknown steps are ignored

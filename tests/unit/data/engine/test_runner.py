"""``lightning_order.data.engine.runner``: the registry, the executability check, the runner and its dry run.

Also the contract that adding a step touches only the step's own module and the pipeline
declaration: a toy ``dedupe`` step is registered here and run through ``OrderedDataModule``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from orders import WRONG_ORDERS

from lightning_order import STANDARD_PIPELINE, DataError, OrderedDataModule, Step
from lightning_order.data.engine.runner import (
    ROWS,
    DataState,
    StepContext,
    StepRegistry,
    StepResult,
    check_executable,
    plan,
    run_steps,
    split_phases,
)
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.steps import DATA_STEPS, STEPS
from lightning_order.ledger import StepLedger


# -- the toy step: its whole implementation (the step's own module) ----------------------------
@STEPS.register("dedupe", takes=ROWS, reads="data", writes_data=True, config=("text_column",))
def dedupe(ctx: StepContext, state: DataState) -> StepResult:
    """Keeps the first row of each cleaned text (before the split)."""
    seen: set[str] = set()
    keep = [i for i, t in enumerate(state.data[ctx.config.text_column]) if not (t in seen or seen.add(t))]
    data = state.data.select(keep).flatten_indices()
    stats = {"rows": len(data), "dropped": len(state.data) - len(data)}
    return StepResult(replace(state, data=data), ctx.fingerprint, stats=stats)


# -- ... and the pipeline declaration --------------------------------------------------------
DEDUPE_PIPELINE = STANDARD_PIPELINE.extend(
    Step("dedupe", requires=("clean",), kind="rowwise"), before="split"
)


def test_a_registered_step_runs_through_the_datamodule_and_its_ledger_is_checked(tmp_path):
    dm = OrderedDataModule(
        cache_dir=str(tmp_path), demo_size=800, vocab_size=200, max_length=16, pipeline=DEDUPE_PIPELINE
    )
    assert dm.order.index("clean") < dm.order.index("dedupe") < dm.order.index("split")
    dm.setup("fit")
    record = dm.ledger.latest("dedupe")
    assert record is not None and record.stats["dropped"] > 0  # the demo has exact duplicates
    assert (
        record.inputs == {"clean": dm.ledger.latest("clean").output} or "engineer_features" in record.inputs
    )
    assert dm.ledger.latest("split").inputs["dedupe"] == record.output  # inputs come from what ran
    assert DEDUPE_PIPELINE.check(dm.ledger) == []
    assert dm.cache_key != OrderedDataModule(cache_dir=str(tmp_path), demo_size=800, vocab_size=200).cache_key
    standard = OrderedDataModule(cache_dir=str(tmp_path), demo_size=800, vocab_size=200, max_length=16)
    assert dm.ledger.latest("split").stats["train_rows"] < standard.ledger.latest("split").stats["train_rows"]


def test_a_step_of_another_pipeline_is_refused_in_an_order(tmp_path):
    order = [*DATA_STEPS[:2], "dedupe", *DATA_STEPS[2:]]
    with pytest.raises(DataError, match="no data step of this pipeline") as info:
        OrderedDataModule(cache_dir=str(tmp_path), order=order, enforce=False)
    assert info.value.step == "dedupe"


def test_a_name_is_registered_once():
    registry = StepRegistry()
    registry.register("a")(dedupe)
    registry.register("a")(dedupe)  # the same function again (a re-import) is fine
    with pytest.raises(DataError, match="two functions") as info:
        registry.register("a")(lambda ctx, state: None)
    assert info.value.step == "a"


# -- executability, from the declarations ------------------------------------------------------
def test_the_mandated_order_is_executable():
    assert check_executable(DATA_STEPS, STEPS, final="shard") == []
    assert split_phases(DATA_STEPS, STEPS) == (list(DATA_STEPS[:-1]), ["shard"])


@pytest.mark.parametrize(
    ("order", "step", "words"),
    [
        (["clean", "load", "split", "build_vocab", "encode", "shard"], "clean", "data is None"),
        (
            ["load", "split", "fit_features", "encode", "build_vocab", "shard"],
            "encode",
            "uses the tokenizer that 'build_vocab' makes",
        ),
        (["load", "build_vocab", "encode", "split", "shard"], "encode", "uses the parts that 'split' makes"),
        (["load", "split", "build_vocab", "encode"], "encode", "must end with shard"),
        (["load", "split", "build_vocab", "encode", "clean", "shard"], "clean", "encoded"),
        (["load", "split", "build_vocab", "encode", "fit_features", "shard"], "fit_features", "encoded"),
        (
            ["load", "split", "fit_features", "build_vocab", "engineer_features", "encode", "shard"],
            "engineer_features",
            "'engineer_features' changes the features that 'fit_features' learnt from",
        ),
        (["load", "split", "build_vocab", "shard", "encode"], "shard", "runs on encoded data"),
        (["load", "clean", "tokenize"], "tokenize", "no registered step"),
    ],
)
def test_unexecutable_orders_name_the_step(order, step, words):
    problems = check_executable(order, STEPS, final="shard")
    assert step in {s for s, _ in problems}
    assert any(words in text for _, text in problems), problems


def test_a_wrong_order_after_shard_runs_in_setup():
    order = WRONG_ORDERS["shard-before-normalize"]
    assert check_executable(order, STEPS, final="shard") == []
    assert split_phases(order, STEPS)[1] == ["shard", "fit_features"]


# -- the dry run ---------------------------------------------------------------------------
def test_the_plan_of_the_mandated_order_is_clean():
    planned = plan(DATA_STEPS, STEPS, DataConfig())
    assert planned.steps() == list(DATA_STEPS)
    assert STANDARD_PIPELINE.check(planned) == []
    assert planned.latest("fit_features").fitted_on == planned.latest("split").parts["train"]


@pytest.mark.parametrize("rule", list(WRONG_ORDERS))
def test_the_plan_of_a_wrong_order_shows_its_rule(rule):
    planned = plan(WRONG_ORDERS[rule], STEPS, DataConfig())
    assert rule in {v.rule for v in STANDARD_PIPELINE.check(planned)}


def test_the_runner_records_inputs_from_the_lineage_not_from_names():
    ran = []

    def fake(name):
        def fn(ctx, state):
            ran.append((name, dict(ctx.inputs), ctx.fitted_on))
            parts = {"train": "t", "val": "v"} if name == "split" else {}
            return StepResult(replace(state, parts=parts or state.parts), f"{name}-out", parts=parts)

        return fn

    registry = StepRegistry()
    for name in ("load", "clean", "split", "build_vocab"):
        spec = STEPS[name]
        registry.add(replace(spec, fn=fake(name)))
    ledger = StepLedger()
    run_steps(
        ["load", "split", "clean", "build_vocab"], registry, StepContext(DataConfig()), DataState(), ledger
    )
    inputs = {name: (i, f) for name, i, f in ran}
    assert inputs["split"][0] == {"load": "load-out"}
    assert inputs["clean"][0] == {"split": "split-out"}  # cleaned after the split: reads the split's output
    assert inputs["build_vocab"] == ({"clean": "clean-out", "split": "t"}, "t")  # learns from train

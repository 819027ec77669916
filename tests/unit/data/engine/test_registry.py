"""``data.engine.registry``: each step declared once, by its pipeline; the registries read it.

The pipelines' steps, kinds, requirements and rules are pinned as they were before the registries
were bound to them (#33 item 2), and a registration that contradicts the order is refused.
"""

from __future__ import annotations

import pytest

from lightning_order import LM_PIPELINE, STANDARD_PIPELINE, DataError, Pipeline, Step
from lightning_order.data.engine.registry import ROWS, StepRegistry, check_executable
from lightning_order.data.lm.datamodule import LM_DATA_STEPS as DATAMODULE_LM_DATA_STEPS
from lightning_order.data.lm.steps import LM_DATA_STEPS, LM_STEPS
from lightning_order.data.text.steps import DATA_STEPS, STEPS
from lightning_order.pipelines import PIPELINES

# (name, requires, kind) of each step before #33, in declaration order.
STANDARD_BEFORE = [
    ("load", (), "source"),
    ("clean", ("load",), "rowwise"),
    ("engineer_features", ("clean",), "rowwise"),
    ("split", ("clean", "engineer_features"), "partition"),
    ("fit_features", ("split",), "fitted"),
    ("build_vocab", ("clean", "split"), "fitted"),
    ("encode", ("fit_features", "build_vocab"), "apply"),
    ("shard", ("encode",), "partition"),
    ("init_model", ("encode",), "model"),
    ("configure_optimizers", ("init_model",), "model"),
    ("train", ("shard", "configure_optimizers"), "loop"),
    ("evaluate", ("train",), "loop"),
]
LM_BEFORE = [
    ("clean", ("load",), "rowwise"),
    ("dedup", ("clean",), "rowwise"),
    ("split", ("clean", "dedup"), "partition"),
    ("build_vocab", ("clean", "split"), "fitted"),
    ("encode", ("build_vocab",), "apply"),
    ("pack", ("encode",), "apply"),
    ("shard", ("pack",), "partition"),
    ("init_model", ("pack",), "model"),
    ("load", (), "source"),
    ("configure_optimizers", ("init_model",), "model"),
    ("train", ("shard", "configure_optimizers"), "loop"),
    ("evaluate", ("train",), "loop"),
]


@pytest.mark.parametrize(
    ("pipeline", "before", "rules"),
    [
        (STANDARD_PIPELINE, STANDARD_BEFORE, {}),
        (
            LM_PIPELINE,
            LM_BEFORE,
            {
                ("split", "dedup"): "dedup-after-split",
                ("init_model", "build_vocab"): "vocab-changed-after-init",
            },
        ),
    ],
    ids=["standard", "lm"],
)
def test_the_pipelines_keep_their_steps_kinds_requirements_and_rules(pipeline, before, rules):
    assert [(s.name, s.requires, s.kind) for s in pipeline.steps.values()] == before
    assert pipeline.order() == Pipeline([Step(n, r, k) for n, r, k in before], rules=rules).order()
    assert pipeline.rules == rules


def test_each_registry_reads_its_data_steps_from_its_pipeline_once():
    assert STEPS.pipeline is STANDARD_PIPELINE and LM_STEPS.pipeline is LM_PIPELINE
    assert DATA_STEPS == STEPS.data_steps() == tuple(STANDARD_PIPELINE.order()[:8])
    assert LM_DATA_STEPS == ("load", "clean", "dedup", "split", "build_vocab", "encode", "pack", "shard")
    assert DATAMODULE_LM_DATA_STEPS is LM_DATA_STEPS  # one definition, imported
    for spec in PIPELINES.values():
        registry = spec.step_registry()
        data = [s.name for s in spec.pipeline if s.kind not in ("model", "loop")]
        assert list(registry.data_steps()) == data, spec.name


@pytest.mark.parametrize("name", list(PIPELINES))
def test_the_librarys_steps_name_no_step_they_must_follow(name):
    """The order is the pipeline's, declared once: a registration says what it does to the data
    (forms, state used, provided, fitted), never which step must come first."""
    registry = PIPELINES[name].step_registry()
    for step in registry:
        assert (registry[step].needs, registry[step].after) == ((), ()), step


@pytest.mark.parametrize("field", ["needs", "after", "consumes"])
def test_a_registration_naming_a_step_the_pipeline_does_not_order_first_is_refused(field):
    registry = StepRegistry(STANDARD_PIPELINE)
    with pytest.raises(DataError) as caught:
        registry.register("clean", **{field: ("split",)})(lambda ctx, state: None)
    message = str(caught.value)
    assert f"step 'clean' is registered with {field}=('split',)" in message
    assert (
        "does not order 'split' before it" in message and "declare the order once, in the Pipeline" in message
    )
    assert "clean" not in registry


def test_a_step_of_your_own_registers_beside_the_pipeline_and_an_unbound_registry_keeps_its_order():
    registry = StepRegistry(STANDARD_PIPELINE)
    registry.register("dedupe", takes=ROWS, needs=("clean",))(lambda ctx, state: None)
    assert "dedupe" in registry and registry.data_steps() == ()  # ordered by the pipeline you extend
    loose = StepRegistry()
    loose.register("b")(lambda ctx, state: None)
    loose.register("a")(lambda ctx, state: None)
    assert loose.data_steps() == ("b", "a")


@pytest.mark.parametrize(
    ("takes", "expected"),
    [
        (None, frozenset({None})),
        ("encoded", frozenset({"encoded"})),
        (["rows", "encoded"], frozenset({"rows", "encoded"})),
    ],
)
def test_takes_is_one_form_none_or_several_and_always_read_as_a_set(takes, expected):
    """A bare string was read as its letters (``None in "rows"`` raised a TypeError mid-check)."""
    registry = StepRegistry()
    registry.register("source", takes=None, makes="rows", reads="none")(lambda ctx, state: None)
    registry.register("mine", takes=takes)(lambda ctx, state: None)
    assert registry["mine"].takes == expected
    problems = check_executable(["source", "mine"], registry, final="rows")
    assert bool(problems) == ("rows" not in expected), problems

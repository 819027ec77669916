"""Tests of the order engine: Step, Pipeline (build-time checks, order, extend), Pipeline.check
for every rule code it can find in a ledger, require_steps, and a property test over random DAGs."""

from __future__ import annotations

import itertools
import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_order import (
    STANDARD_PIPELINE,
    OrderError,
    OrderWarning,
    Pipeline,
    Step,
    StepLedger,
    Violation,
    require_steps,
)

STANDARD_ORDER = STANDARD_PIPELINE.order()


def run_ledger(names, pipeline=STANDARD_PIPELINE, *, fitted_on=None, parts=None):
    """Records ``names`` in order, each consuming the latest output of what it requires.

    Split steps get train/val parts; fitted steps record ``fitted_on`` = the train part unless
    ``fitted_on`` maps their name to another fingerprint (given as a step name whose output to use).
    """
    ledger = StepLedger()
    fitted_on = fitted_on or {}
    for name in names:
        step = pipeline[name] if name in pipeline else None
        inputs = {}
        for req in step.requires if step else ():
            rec = ledger.latest(req)
            if rec is not None:
                inputs[req] = rec.parts.get("train", rec.output) if rec.parts else rec.output
        kwargs = {}
        if name == "split" or (parts and name in parts):
            base = ledger.latest("engineer_features") or ledger.latest("load")
            seed = base.output if base else "none"
            kwargs["parts"] = {"train": f"train-of-{seed}", "val": f"val-of-{seed}"}
        if step is not None and step.kind == "fitted":
            if name in fitted_on:
                source = ledger.latest(fitted_on[name])
                kwargs["fitted_on"] = source.output if source else None
            else:
                split = ledger.latest("split")
                kwargs["fitted_on"] = split.parts["train"] if split else None
        ledger.record(name, inputs=inputs, **kwargs)
    return ledger


def rules_of(violations):
    return sorted({v.rule for v in violations})


# -- building pipelines ---------------------------------------------------------------------


def test_standard_pipeline_order_is_the_mandated_one():
    # The one place the mandated order is spelled out in the tests (docs/data.md, "The steps"); the others read it.
    assert STANDARD_PIPELINE.order() == [
        "load",
        "clean",
        "engineer_features",
        "split",
        "fit_features",
        "build_vocab",
        "encode",
        "shard",
        "init_model",
        "configure_optimizers",
        "train",
        "evaluate",
    ]
    assert len(STANDARD_PIPELINE) == 12


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("load", "source"),
        ("clean", "rowwise"),
        ("engineer_features", "rowwise"),
        ("split", "partition"),
        ("fit_features", "fitted"),
        ("build_vocab", "fitted"),
        ("encode", "apply"),
        ("shard", "partition"),
        ("init_model", "model"),
        ("configure_optimizers", "model"),
        ("train", "loop"),
        ("evaluate", "loop"),
    ],
)
def test_standard_pipeline_kinds(name, kind):
    assert STANDARD_PIPELINE[name].kind == kind


def test_cycle_raises_with_its_path():
    with pytest.raises(OrderError) as info:
        Pipeline([Step("a", ("c",)), Step("b", ("a",)), Step("c", ("b",))])
    assert info.value.rules == ["cycle"]
    (violation,) = info.value.violations
    assert violation.steps[0] == violation.steps[-1]
    assert set(violation.steps) == {"a", "b", "c"}
    assert "->" in str(info.value)


def test_self_requirement_is_a_cycle():
    with pytest.raises(OrderError) as info:
        Step("a", ("a",))
    assert info.value.rules == ["cycle"]


def test_unknown_requirement_is_missing_step():
    with pytest.raises(OrderError) as info:
        Pipeline([Step("load", kind="source"), Step("clean", ("lod",))])
    assert info.value.rules == ["missing-step"]
    assert "lod" in str(info.value)


def test_bad_kind_and_duplicates_are_clear_errors():
    with pytest.raises(ValueError, match="expected one of"):
        Step("x", kind="magic")
    with pytest.raises(OrderError, match="two steps named 'a'") as info:
        Pipeline([Step("a"), Step("a")])
    assert info.value.rules == ["duplicate-step"]  # as the Pipeline docstring promises
    with pytest.raises(TypeError, match="Step objects"):
        Pipeline(["load"])


def test_extend_adds_a_user_step_between_clean_and_split():
    dedupe = Step("dedupe", ("clean",), "rowwise")
    pipeline = STANDARD_PIPELINE.extend(dedupe, before="split")
    order = pipeline.order()
    assert order.index("clean") < order.index("dedupe") < order.index("split")
    assert "dedupe" in pipeline["split"].requires
    assert "dedupe" not in STANDARD_PIPELINE  # the standard pipeline is left unchanged


def test_extend_checks_the_result():
    with pytest.raises(OrderError) as info:
        STANDARD_PIPELINE.extend(Step("clean", ("encode",)))
    assert info.value.rules == ["cycle"]
    with pytest.raises(OrderError) as info:
        STANDARD_PIPELINE.extend(Step("dedupe", ("clean",)), before="nowhere")
    assert info.value.rules == ["missing-step"]


# -- checking ledgers ------------------------------------------------------------------------


def test_standard_order_gives_no_violation():
    assert STANDARD_PIPELINE.check(run_ledger(STANDARD_ORDER)) == []


@pytest.mark.parametrize("stop", range(1, len(STANDARD_ORDER) + 1))
def test_a_ledger_so_far_is_clean(stop):
    assert STANDARD_PIPELINE.check(run_ledger(STANDARD_ORDER[:stop])) == []


def test_empty_ledger_is_clean():
    assert STANDARD_PIPELINE.check(StepLedger()) == []


# One hand-built ledger per rule code the ledger check can find, with the exact codes expected.
LEDGER_CASES = {
    "missing-step": (["load", "clean", "split"], {}, ["missing-step"]),
    "out-of-order": (
        [*STANDARD_ORDER[:9], "train", "configure_optimizers"],  # train before its optimizer
        {},
        ["out-of-order"],
    ),
    "vocab-before-clean": (
        ["load", "build_vocab", "clean"],
        {},
        ["missing-step", "vocab-before-clean"],
    ),
    "fit-before-split": (
        ["load", "clean", "engineer_features", "fit_features", "split"],
        {"fit_features": "engineer_features"},
        ["fit-before-split"],
    ),
    "shard-before-normalize": (
        ["load", "clean", "engineer_features", "split", "build_vocab", "shard", "fit_features", "encode"],
        {},
        ["shard-before-normalize"],  # the specific code replaces the generic out-of-order
    ),
    "init-before-data": (
        [
            "load",
            "clean",
            "engineer_features",
            "split",
            "init_model",
            "fit_features",
            "build_vocab",
            "encode",
        ],
        {},
        ["init-before-data"],
    ),
}


@pytest.mark.parametrize("code", sorted(LEDGER_CASES))
def test_each_order_rule_is_found(code):
    names, fitted_on, expected = LEDGER_CASES[code]
    violations = STANDARD_PIPELINE.check(run_ledger(names, fitted_on=fitted_on))
    assert code in rules_of(violations)
    assert rules_of(violations) == expected


def test_vocab_trained_on_raw_text_after_the_split_is_vocab_before_clean():
    # Everything ran in order, but build_vocab consumed the raw (loaded) text instead of the
    # cleaned one: exactly one violation, with the specific code.
    ledger = run_ledger(["load", "clean", "engineer_features", "split"])
    train = ledger.latest("split").parts["train"]
    ledger.record(
        "build_vocab", inputs={"clean": ledger.latest("load").output, "split": train}, fitted_on=train
    )
    violations = STANDARD_PIPELINE.check(ledger)
    assert [v.rule for v in violations] == ["vocab-before-clean"]
    assert violations[0].steps == ("build_vocab", "clean")


def test_vocab_before_clean_by_order_also_learned_before_the_split():
    violations = STANDARD_PIPELINE.check(
        run_ledger(["load", "build_vocab", "clean", "engineer_features", "split"])
    )
    assert rules_of(violations) == ["fit-before-split", "vocab-before-clean"]


def test_fitted_on_validation_rows_is_fit_before_split():
    ledger = run_ledger(["load", "clean", "engineer_features", "split"])
    split = ledger.latest("split")
    ledger.record("fit_features", inputs={"split": split.parts["train"]}, fitted_on=split.parts["val"])
    violations = STANDARD_PIPELINE.check(ledger)
    assert [v.rule for v in violations] == ["fit-before-split"]
    assert "non-train part" in violations[0].message


def test_fitted_on_the_whole_data_after_split_is_fit_before_split():
    ledger = run_ledger(["load", "clean", "engineer_features", "split"])
    whole = ledger.latest("engineer_features").output
    ledger.record("fit_features", inputs={"split": ledger.latest("split").parts["train"]}, fitted_on=whole)
    assert [v.rule for v in STANDARD_PIPELINE.check(ledger)] == ["fit-before-split"]


def test_fitted_on_one_shard_is_shard_before_normalize():
    ledger = run_ledger(["load", "clean", "engineer_features", "split", "build_vocab"])
    shard = ledger.record("shard", inputs={"split": "x"}, parts={"rank0": "shard-0"})
    ledger.record("fit_features", inputs={"shard": shard.parts["rank0"]}, fitted_on="shard-0")
    assert "shard-before-normalize" in rules_of(STANDARD_PIPELINE.check(ledger))


def test_clean_rerun_after_build_vocab_makes_downstream_stale():
    names = STANDARD_ORDER[:6]  # through build_vocab
    ledger = run_ledger(names)
    ledger.record("clean", inputs={"load": ledger.latest("load").output}, output="a-new-clean-output")
    violations = STANDARD_PIPELINE.check(ledger)
    assert rules_of(violations) == ["stale-input"]
    assert ("build_vocab", "clean") in {v.steps for v in violations}
    assert ("engineer_features", "clean") in {v.steps for v in violations}


def test_deterministic_rerun_is_not_stale():
    ledger = run_ledger(STANDARD_ORDER[:6])
    again = ledger.latest("clean")
    ledger.record("clean", inputs=again.inputs, output=again.output)
    assert STANDARD_PIPELINE.check(ledger) == []


def test_a_correct_rerun_clears_an_old_mistake():
    ledger = run_ledger(["load", "build_vocab", "clean", "engineer_features", "split"])
    assert "vocab-before-clean" in rules_of(STANDARD_PIPELINE.check(ledger))
    split = ledger.latest("split")
    ledger.record(
        "build_vocab",
        inputs={"clean": ledger.latest("clean").output, "split": split.parts["train"]},
        fitted_on=split.parts["train"],
    )
    assert STANDARD_PIPELINE.check(ledger) == []


def test_unknown_steps_in_the_ledger_are_ignored():
    ledger = run_ledger(STANDARD_ORDER[:3])
    ledger.record("my_custom_logging")
    assert STANDARD_PIPELINE.check(ledger) == []


def test_user_step_is_checked_like_any_other():
    pipeline = STANDARD_PIPELINE.extend(Step("dedupe", ("clean",), "rowwise"), before="split")
    good = run_ledger(["load", "clean", "dedupe", "engineer_features", "split"], pipeline)
    assert pipeline.check(good) == []
    skipped = run_ledger(["load", "clean", "engineer_features", "split"], pipeline)
    assert rules_of(pipeline.check(skipped)) == ["missing-step"]
    late = run_ledger(["load", "clean", "engineer_features", "split", "dedupe"], pipeline)
    assert rules_of(pipeline.check(late)) == ["out-of-order"]


def test_order_error_lists_each_violation_with_symptom_and_fix():
    ledger = run_ledger(["load", "build_vocab", "clean"])
    with pytest.raises(OrderError) as info:
        STANDARD_PIPELINE.validate(ledger)
    text = str(info.value)
    assert "vocab-before-clean" in text and "likely symptom" in text and "fix:" in text
    assert "expected order" in text
    assert isinstance(info.value, RuntimeError)


def test_validate_warn_mode_issues_an_order_warning():
    ledger = run_ledger(["load", "build_vocab", "clean"])
    with pytest.warns(OrderWarning, match="vocab-before-clean"):
        violations = STANDARD_PIPELINE.validate(ledger, on_violation="warn")
    assert violations
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert STANDARD_PIPELINE.validate(run_ledger(STANDARD_ORDER), on_violation="warn") == []


def test_order_error_pickles():
    import pickle

    error = OrderError([Violation("cycle", ("a", "b", "a"), "m")])
    again = pickle.loads(pickle.dumps(error))
    assert again.rules == ["cycle"] and str(again) == str(error)


# -- require_steps ---------------------------------------------------------------------------


class Prep:
    def __init__(self, with_ledger=True):
        self.ledger = StepLedger() if with_ledger else None

    @require_steps()
    def load(self):
        return "loaded"

    @require_steps("load")
    def clean(self):
        return "cleaned"

    @require_steps("clean", "engineer_features")
    def build_vocab(self):
        return "vocab"

    @require_steps("load")
    def engineer_features(self):
        self.ledger.record("engineer_features", output="custom")


def test_require_steps_raises_naming_the_missing_steps_and_order():
    prep = Prep()
    prep.load()
    with pytest.raises(OrderError) as info:
        prep.build_vocab()
    assert set(info.value.rules) == {"vocab-before-clean", "missing-step"}
    text = str(info.value)
    assert "clean" in text and "engineer_features" in text and "required order" in text
    assert prep.ledger.steps() == ["load"]  # nothing recorded for the failed call
    assert not getattr(prep, "_build_vocab_done", False)


def test_require_steps_passes_marks_done_and_records():
    prep = Prep()
    assert prep.load() == "loaded"
    assert prep.clean() == "cleaned"
    prep.engineer_features()
    assert prep.build_vocab() == "vocab"
    assert prep._build_vocab_done is True
    assert prep.ledger.steps() == ["load", "clean", "engineer_features", "build_vocab"]
    # the method that recorded itself is not recorded twice; inputs chain to the latest outputs
    assert prep.ledger.latest("engineer_features").output == "custom"
    assert prep.ledger.latest("build_vocab").inputs == {
        "clean": prep.ledger.latest("clean").output,
        "engineer_features": "custom",
    }


def test_require_steps_without_a_ledger_uses_done_flags():
    prep = Prep(with_ledger=False)
    with pytest.raises(OrderError) as info:
        prep.clean()
    assert info.value.rules == ["missing-step"]
    prep.load()
    assert prep.clean() == "cleaned" and prep._clean_done


# -- property: every topological order passes, every order breaking an edge is flagged --------


@st.composite
def random_dags(draw):
    size = draw(st.integers(min_value=2, max_value=8))
    names = [f"s{i}" for i in range(size)]
    steps = []
    for i, name in enumerate(names):
        reqs = draw(st.lists(st.sampled_from(names[:i]), unique=True, max_size=3)) if i else []
        steps.append(Step(name, tuple(reqs), "rowwise"))
    return Pipeline(steps)


def _is_topological(pipeline, order):
    position = {n: i for i, n in enumerate(order)}
    return all(position[r] < position[s.name] for s in pipeline for r in s.requires)


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.randoms(use_true_random=False))
def test_property_orders_pass_iff_topological(pipeline, rnd):
    names = pipeline.order()
    candidates = [list(p) for p in itertools.islice(itertools.permutations(names), 200)]
    rnd.shuffle(candidates)
    for order in candidates[:25]:
        ledger = StepLedger()
        for name in order:
            ledger.record(
                name, inputs={r: ledger.latest(r).output for r in pipeline[name].requires if ledger.latest(r)}
            )
        violations = pipeline.check(ledger)
        if _is_topological(pipeline, order):
            assert violations == [], (order, violations)
        else:
            assert violations, order
            assert rules_of(violations) == ["out-of-order"]


def test_property_random_seed_smoke():
    # The topological order the pipeline gives is itself always accepted.
    rng = random.Random(0)
    for _ in range(20):
        size = rng.randint(2, 10)
        steps = [Step(f"n{i}", tuple(f"n{j}" for j in range(i) if rng.random() < 0.3)) for i in range(size)]
        pipeline = Pipeline(steps)
        ledger = StepLedger()
        for name in pipeline.order():
            ledger.record(name)
        assert pipeline.check(ledger) == []

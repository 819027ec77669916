"""``lightning_order.spec``: each pipeline's facts written once, in its spec, and asked of it.

The name, the config checks (``pack-without-eos`` of ``eos=False``, which the LM preparation asks
of its spec), the demo config ``--help`` shows, the files a cache must hold, the step names
another pipeline owns, and the typed preparation interface.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import ROOT

from lightning_order import (
    LM_PIPELINE,
    STANDARD_PIPELINE,
    OrderError,
    PipelineSpec,
    Preparation,
    StepNameError,
)
from lightning_order.cli.help import pipeline_help
from lightning_order.data.lm import spec as lm_spec
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.prepare import PREPARATION as LM_PREPARATION
from lightning_order.data.text import spec as text_spec
from lightning_order.data.text.prepare import PREPARATION as TEXT_PREPARATION
from lightning_order.pipelines import PIPELINES, check_step_names, register, unregister

PIPELINE_NAMES = {text_spec.NAME, lm_spec.NAME}


def test_each_spec_is_registered_under_the_name_its_package_declares():
    assert text_spec.NAME == "standard" and lm_spec.NAME == "lm"
    assert PIPELINES[text_spec.NAME] is text_spec.TEXT_SPEC and PIPELINES[lm_spec.NAME] is lm_spec.LM_SPEC
    assert text_spec.TEXT_SPEC.pipeline is STANDARD_PIPELINE and lm_spec.LM_SPEC.pipeline is LM_PIPELINE


def _string_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize(
    "module",
    [
        "data/text/prepare.py",
        "data/text/datamodule.py",
        "data/lm/prepare.py",
        "data/lm/datamodule.py",
        "pipelines.py",
        "cli/help.py",
        "cli/auditing.py",
        "callbacks/validator/lm.py",
        "callbacks/validator/phases.py",
    ],
)
def test_the_pipelines_names_are_written_only_in_their_specs(module: str):
    assert PIPELINE_NAMES.isdisjoint(_string_literals(ROOT / "lightning_order" / module))


def test_pack_without_eos_is_the_lm_specs_config_check_and_the_preparation_asks_it():
    config = LMConfig(eos=False)
    (violation,) = lm_spec.LM_SPEC.check_config(config, "MyLM")
    assert violation.rule == "pack-without-eos" and violation.steps == ("pack", "encode")
    assert "MyLM(eos=False) would concatenate documents without an end-of-text token" in violation.message
    with pytest.raises(OrderError) as caught:
        LM_PREPARATION.order_of(config, None, owner="MyLM")
    assert caught.value.rules == ["pack-without-eos"]
    assert "pass enforce=False to run it anyway" in str(caught.value)
    assert LM_PREPARATION.order_of(config, None, enforce=False)[-1] == "shard"
    assert lm_spec.LM_SPEC.check_config(LMConfig(), "MyLM") == []


def test_help_names_each_other_pipelines_demo_config_from_its_spec():
    text = pipeline_help("fit", ("text classification", "X"), {"lm": ("causal language modelling", "Y")})
    assert f"--config {lm_spec.LM_SPEC.demo_config} --help" in text
    assert lm_spec.LM_SPEC.demo_config == "configs/lm-demo.yaml"
    assert (ROOT / lm_spec.LM_SPEC.demo_config).is_file() and (
        ROOT / text_spec.TEXT_SPEC.demo_config
    ).is_file()


def test_a_step_of_another_registered_pipeline_is_named_with_its_pipeline():
    with pytest.raises(StepNameError) as caught:
        check_step_names(STANDARD_PIPELINE, ["pack"], where="recording")
    assert "'pack' is a step of LM_PIPELINE" in str(caught.value) and "pass pipeline=LM_PIPELINE" in str(
        caught.value
    )
    with pytest.raises(StepNameError) as caught:
        check_step_names(LM_PIPELINE, ["fit_features"])
    assert "'fit_features' is a step of STANDARD_PIPELINE" in str(caught.value)


def test_every_preparation_is_a_typed_preparation_and_the_specs_give_it():
    for spec in PIPELINES.values():
        assert isinstance(spec.preparer(), Preparation)
    assert text_spec.TEXT_SPEC.preparer() is TEXT_PREPARATION and lm_spec.LM_SPEC.preparer() is LM_PREPARATION
    with pytest.raises(TypeError):
        Preparation()  # type: ignore[abstract]


def test_register_admits_a_spec_and_refuses_a_taken_name_or_another_type():
    spec = PipelineSpec(
        name="vision",
        pipeline=STANDARD_PIPELINE,
        dims=(),
        datamodule="x:Y",
        model="x:Z",
        config="x:C",
        preparation="x:P",
        steps="x:S",
    )
    assert register(spec) is spec and PIPELINES["vision"] is spec
    try:
        with pytest.raises(ValueError, match="'vision' is registered already"):
            register(PipelineSpec(**{**spec.__dict__, "title": "another"}))
        with pytest.raises(TypeError, match="takes a PipelineSpec"):
            register("vision")  # type: ignore[arg-type]
    finally:
        unregister("vision")
    assert "vision" not in PIPELINES
    with pytest.raises(ValueError, match="cannot unregister 'lm'"):
        unregister("lm")


def test_the_files_every_cache_holds_are_the_specs():
    assert text_spec.TEXT_SPEC.files == lm_spec.LM_SPEC.files == ("train", "val", "tokenizer.json")


def test_one_word_for_a_pipeline_spec():
    """Issue #44: "descriptor" and "spec" named one thing; the package says "spec" (compat.py's
    descriptor is Python's attribute protocol, another thing)."""
    saying = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "lightning_order").rglob("*.py"))
        if path.name != "compat.py" and "descriptor" in path.read_text().lower()
    ]
    assert saying == []

"""``lightning_order.pipelines``: one spec per pipeline, read by everything that must pick one.

The bug this pins: ``lightning-order graph --manifest <an LM cache>`` drew the standard pipeline
with two false ``missing-step`` edges while ``audit`` called the same folder correct. The keywords
both DataModules share: tests/unit/data/engine/test_datamodule_contract.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_order import (
    LM_PIPELINE,
    STANDARD_PIPELINE,
    OrderedCausalLM,
    OrderedDataModule,
    OrderedLMDataModule,
    OrderedTextClassifier,
    Pipeline,
    StepLedger,
    record_step,
)
from lightning_order.cli import main
from lightning_order.data.engine.config import BaseDataConfig
from lightning_order.pipelines import PIPELINES, all_dims, spec_for

SMALL_LM = {"max_documents": 200, "vocab_size": 300, "block_size": 16, "batch_size": 8}


@pytest.fixture(scope="module")
def lm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dm = OrderedLMDataModule(**SMALL_LM, cache_dir=str(tmp_path_factory.mktemp("lm")))
    dm.prepare_data()
    return dm.cache_path


@pytest.mark.parametrize("name", list(PIPELINES))
def test_each_spec_names_classes_of_its_own_pipeline(name: str) -> None:
    spec = PIPELINES[name]
    datamodule, model = spec.datamodule_class(), spec.model_class()
    assert datamodule.pipeline_name == name and datamodule.spec() is spec
    assert issubclass(spec.config_class(), BaseDataConfig)
    assert set(spec.dims) <= set(spec.config_class().__dataclass_fields__) | {
        "num_features",
        "num_classes",
        "padded_vocab_size",
    }
    for dim in spec.dims:  # every dim the CLI links is a constructor argument of the model
        assert dim in model.__init__.__code__.co_varnames, (model, dim)
    assert spec_for(classes=[datamodule]) is spec
    assert spec_for(classes=[model]) is spec
    assert spec_for(pipeline=spec.pipeline) is spec
    assert spec_for(name=name) is spec


def test_the_manifest_names_its_pipeline_and_a_subclass_finds_its_spec() -> None:
    assert spec_for(info={}).pipeline is STANDARD_PIPELINE  # classification caches before the key
    assert spec_for(info={"pipeline": "lm"}).pipeline is LM_PIPELINE

    class MyLM(OrderedCausalLM):
        pass

    class MyData(OrderedDataModule):
        pass

    assert spec_for(classes=[MyLM]).name == "lm" and spec_for(classes=[MyData]).name == "standard"
    with pytest.raises(KeyError, match="standard, lm"):
        spec_for(name="vision")


def test_dims_are_declared_once_per_pipeline() -> None:
    assert PIPELINES["standard"].dims == ("vocab_size", "num_features", "num_classes", "max_length")
    assert PIPELINES["lm"].dims == ("vocab_size", "padded_vocab_size", "block_size")
    assert all_dims() == (*PIPELINES["standard"].dims, "padded_vocab_size", "block_size")
    assert OrderedTextClassifier is PIPELINES["standard"].model_class()


def test_graph_of_an_lm_cache_draws_the_lm_pipeline_without_violations(lm_cache: Path, capsys) -> None:
    assert main(["graph", "--manifest", str(lm_cache)]) == 0
    mermaid = capsys.readouterr().out
    for step in ("dedup", "pack"):
        assert f"{step}[" in mermaid
    assert "engineer_features" not in mermaid and "fit_features" not in mermaid
    assert "missing-step" not in mermaid
    # No step marked as violated (the class definition itself is always there).
    assert not [
        line for line in mermaid.splitlines() if line.strip().startswith("class ") and "violated" in line
    ]
    assert main(["audit", str(lm_cache)]) == 0
    assert "no violation" in capsys.readouterr().out


def test_graph_without_a_manifest_draws_the_named_pipeline(capsys) -> None:
    assert main(["graph", "--pipeline", "lm"]) == 0
    assert "dedup[" in capsys.readouterr().out
    assert main(["graph"]) == 0
    assert "fit_features[" in capsys.readouterr().out


def test_a_ledger_naming_no_pipeline_is_known_by_its_steps() -> None:
    """A hand-written LM ledger saved before it named its pipeline (#26): judged by LM_PIPELINE."""
    lm, standard, unknown = StepLedger(), StepLedger(), StepLedger()
    for step in ("load", "clean", "dedup", "split"):
        lm.record(step)
    for step in ("load", "clean", "split"):
        standard.record(step)
    unknown.record("load")
    unknown.info["declared_steps"] = ["load", "tokenize_images"]
    assert spec_for(ledger=lm).name == "lm"
    assert spec_for(ledger=standard).name == "standard"
    assert spec_for(ledger=unknown).name == "standard"  # no pipeline has them all: the default


@pytest.mark.parametrize(("pipeline", "recorded"), [(LM_PIPELINE, "lm"), (STANDARD_PIPELINE, None)])
def test_record_step_names_a_pipeline_other_than_the_default(
    pipeline: Pipeline, recorded: str | None
) -> None:
    class Data:
        @record_step("load", pipeline=pipeline)
        def load(self) -> list[str]:
            return ["a document"]

    data = Data()
    data.load()
    assert data.ledger.info.get("pipeline") == recorded
    assert spec_for(ledger=data.ledger).pipeline is pipeline

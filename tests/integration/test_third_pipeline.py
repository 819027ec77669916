"""A third pipeline, written outside the library: ``examples/toy_regression.py``, on the public API only.

The example (``load → split → scale → shard``, ``scale`` a fitted step of its own) imports nothing
but ``lightning_order``'s public names and is admitted with ``register()``. Here the library is
driven through it as a user would: ``lightning-order prepare`` and ``fit`` run it, ``audit`` and
``graph`` read its cache, ``OrderValidator`` is silent on a correct ``Trainer.fit`` and stops a
planted order error with its rule code.
"""

from __future__ import annotations

import ast
import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import ROOT, quiet_trainer
from toy_regression import (
    CHECK_NAME,
    NAME,
    PREPARATION,
    TOY_SPEC,
    ToyDataModule,
    ToyRegressor,
    register_toy_check,
)

import lightning_order
from lightning_order import (
    RULES,
    OrderError,
    OrderValidator,
    OrderWarning,
    PipelineSpec,
    register,
    unregister_check,
)
from lightning_order.cli import main
from lightning_order.data.engine.datamodule import OrderedDataModuleBase
from lightning_order.ledger import MANIFEST_NAME
from lightning_order.pipelines import PIPELINES, spec_for, unregister

EXAMPLE = ROOT / "examples" / "toy_regression.py"
PLANTED = ("load", "scale", "split", "shard")  # scale learns from validation rows too

# Collected with every other test module: the registry is left as the library has it until this
# module's tests run (the fixture below registers the spec for them).
unregister(NAME)
unregister_check(CHECK_NAME)


@pytest.fixture(autouse=True, scope="module")
def registered() -> Iterator[PipelineSpec]:
    register(TOY_SPEC, replace=True)
    register_toy_check()
    yield TOY_SPEC
    unregister(NAME)  # the other tests see the library's pipelines and checks only
    unregister_check(CHECK_NAME)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("toy"))


def test_the_example_imports_public_names_of_lightning_order_only() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    ours = [
        node
        for node in imports
        if isinstance(node, ast.ImportFrom) and str(node.module).startswith("lightning_order")
    ]
    modules = [alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names]
    assert [node.module for node in ours] == ["lightning_order"]
    assert not [module for module in modules if module.startswith("lightning_order")]
    names = [alias.name for node in ours for alias in node.names]
    assert set(names) <= set(lightning_order.__all__), set(names) - set(lightning_order.__all__)
    assert not [name for name in names if name.startswith("_")]


def test_the_spec_is_registered_from_outside_and_found_by_name_class_and_ledger(cache_dir: str) -> None:
    assert PIPELINES[NAME] is TOY_SPEC and TOY_SPEC.preparer() is PREPARATION
    dm = ToyDataModule(cache_dir=cache_dir)
    dm.prepare_data()
    assert spec_for(classes=[ToyDataModule]) is TOY_SPEC is spec_for(ledger=dm.ledger)
    assert dm.num_inputs == 1  # the dim property the base gives every pipeline's DataModule
    assert getattr(dm, "tokenizer", None) is None  # it prepares none (the monitor asks so)
    assert TOY_SPEC.check(dm.ledger) == []
    # The base's manifest: the pipeline, the config's identity, the files, the data fingerprints.
    info = dm.ledger.info
    assert info["pipeline"] == NAME and info["config"]["rows"] == 96
    assert set(info["files"]) == {"train.npz", "val.npz"} and info["data_fingerprints"]["manifest"]
    assert dm.cache_key == PREPARATION.cache_key(dm.config, dm.order) != ToyDataModule(rows=95).cache_key
    with pytest.raises(ValueError, match="registered already"):
        register(replace(TOY_SPEC, title="another"))


def test_a_datamodule_of_an_unregistered_pipeline_is_refused_when_its_class_is_defined() -> None:
    with pytest.raises(KeyError, match=r"call lightning_order.register\(spec\) before defining the class"):

        class Unregistered(OrderedDataModuleBase):
            pipeline_name = "never_registered"


def test_prepare_audit_and_graph_read_the_prepared_cache(
    cache_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = "--model=toy_regression.ToyRegressor"
    assert main(["prepare", model, f"--data.cache_dir={cache_dir}", "--data.rows=96"]) == 0
    dm = ToyDataModule(cache_dir=cache_dir)
    assert str(dm.cache_path) in capsys.readouterr().out
    assert main(["audit", str(dm.cache_path)]) == 0
    assert "no violation" in capsys.readouterr().out
    assert main(["graph", "--manifest", str(dm.cache_path)]) == 0
    mermaid = capsys.readouterr().out
    assert "scale[" in mermaid and "engineer_features" not in mermaid
    assert not [
        line for line in mermaid.splitlines() if line.strip().startswith("class ") and "violated" in line
    ]
    assert main(["graph", "--pipeline", NAME]) == 0
    assert "scale[" in capsys.readouterr().out


def test_a_planted_order_error_is_audited_with_its_rule(
    cache_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dm = ToyDataModule(cache_dir=cache_dir, order=list(PLANTED), enforce=False)
    dm.prepare_data()
    assert main(["audit", str(dm.cache_path)]) == 1
    assert "fit-before-split" in capsys.readouterr().out
    manifest = json.loads((dm.cache_path / MANIFEST_NAME).read_text())
    assert manifest["info"]["pipeline"] == NAME


@pytest.mark.slow
def test_fit_from_the_command_line_runs_the_example(
    cache_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--model=toy_regression.ToyRegressor"]  # its spec names the DataModule
    trainer = ["--trainer.max_steps=3", "--trainer.accelerator=cpu", f"--trainer.default_root_dir={tmp_path}"]
    assert (
        main(["fit", *args, f"--data.cache_dir={cache_dir}", *trainer, "--trainer.enable_progress_bar=false"])
        == 0
    )
    out = capsys.readouterr().out
    assert "the order is correct" in out and "val_loss" in out


def test_fit_with_the_validator_is_silent_on_a_correct_run(cache_dir: str) -> None:
    dm = ToyDataModule(cache_dir=cache_dir)
    trainer = quiet_trainer(
        None, [OrderValidator()], max_epochs=1, limit_train_batches=3, limit_val_batches=2
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(ToyRegressor(**dm.dims), dm)
    assert not [w for w in caught if issubclass(w.category, OrderWarning)]
    assert trainer.global_step == 3
    assert {"init_model", "train"} <= set(dm.ledger.steps())


def test_the_validator_stops_a_planted_order_error_before_step_one(cache_dir: str) -> None:
    dm = ToyDataModule(cache_dir=cache_dir, order=list(PLANTED), enforce=False)
    trainer = quiet_trainer(
        None, [OrderValidator()], max_epochs=1, limit_train_batches=3, limit_val_batches=2
    )
    with pytest.raises(OrderError) as caught:
        trainer.fit(ToyRegressor(**dm.dims), dm)
    assert "fit-before-split" in caught.value.rules and trainer.global_step == 0
    with pytest.raises(OrderError) as refused:
        ToyDataModule(cache_dir=cache_dir, order=list(PLANTED))
    assert refused.value.rules == ["fit-before-split"]


class UnscaledToyDataModule(ToyDataModule):
    """A planted bug the order cannot show: x served raw again after ``scale`` (a transform after it)."""

    def to_dataset(self, data):  # type: ignore[no-untyped-def]
        return super().to_dataset({**data, "x": data["x"] * 3.0 + 5.0})


def test_the_examples_own_validator_check_stops_rows_that_are_not_standardised(cache_dir: str) -> None:
    assert "x-not-standardised" in RULES  # declared by the example, with its meaning and fix
    dm = UnscaledToyDataModule(cache_dir=cache_dir)
    trainer = quiet_trainer(
        None, [OrderValidator()], max_epochs=1, limit_train_batches=3, limit_val_batches=2
    )
    with pytest.raises(OrderError) as caught:
        trainer.fit(ToyRegressor(**dm.dims), dm)
    assert caught.value.rules == ["x-not-standardised"] and trainer.global_step == 0
    assert "serve the rows `scale` wrote" in str(caught.value)

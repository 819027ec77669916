"""A third pipeline, written only here: one spec, registered with ``register()``, and nothing else.

A toy regression pipeline (``load → split → scale → shard``; ``scale`` learns a mean and a
standard deviation from the train split) with its config, steps, Pipeline, Preparation,
DataModule (a subclass of the engine's base) and model lives in this module. The library is not
edited for it: ``lightning-order audit`` and ``graph`` read its prepared cache, ``OrderValidator``
is silent on a correct ``Trainer.fit`` and stops a planted order error with its rule code.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer

from lightning_order import (
    STANDARD_PIPELINE,
    OrderError,
    OrderValidator,
    OrderWarning,
    Pipeline,
    PipelineSpec,
    Preparation,
    Step,
    fingerprint,
    register,
)
from lightning_order.cli import main
from lightning_order.data.engine.cache import TEMP_MARKER
from lightning_order.data.engine.config import BaseDataConfig
from lightning_order.data.engine.datamodule import OrderedDataModuleBase
from lightning_order.data.engine.registry import StepRegistry
from lightning_order.data.engine.runner import (
    DataState,
    StepContext,
    StepResult,
    resolve_order,
    run_preparation,
    train_data,
)
from lightning_order.data.engine.storage import file_records
from lightning_order.ledger import MANIFEST_NAME, StepLedger
from lightning_order.pipelines import PIPELINES, descriptor_for, unregister

NAME = "toy_regression"
HERE = __name__

TOY_PIPELINE = Pipeline(
    [
        Step("load", (), "source", "draw (x, y) pairs"),
        Step("split", ("load",), "partition", "train/validation by row hash"),
        Step("scale", ("split",), "fitted", "standardise x with the train split's statistics"),
        Step("shard", ("scale",), "partition", "this rank's rows"),
        Step("init_model", ("scale",), "model", "build the model from the data's dims"),
        *(STANDARD_PIPELINE[name] for name in ("configure_optimizers", "train", "evaluate")),
    ]
)
TOY_STEPS = StepRegistry(TOY_PIPELINE)


@dataclass(frozen=True)
class ToyConfig(BaseDataConfig):
    """The toy pipeline's arguments (the base's, plus how many rows to draw)."""

    rows: int = 96
    """rows drawn by ``load``."""


@TOY_STEPS.register("load", takes=frozenset({None}), makes="rows", reads="none", writes_data=True)
def load(ctx: StepContext, state: DataState) -> StepResult:
    x = np.random.default_rng(ctx.config.seed).normal(5.0, 3.0, size=ctx.config.rows).astype(np.float32)
    data = {"x": x, "y": 2.0 * x + 1.0}
    return StepResult(replace(state, data=data), output=fingerprint("load", ctx.config.rows, ctx.config.seed))


@TOY_STEPS.register("split", reads="data", writes_data=True, partitions=("train", "val"))
def split(ctx: StepContext, state: DataState) -> StepResult:
    data = state.data
    val = np.arange(len(data["x"])) % 4 == 0
    parts = {name: {k: v[mask] for k, v in data.items()} for name, mask in (("train", ~val), ("val", val))}
    output = fingerprint("split", dict(ctx.inputs))
    fps = {name: fingerprint(output, name) for name in parts}
    return StepResult(replace(state, data=None, parts=parts), output=output, parts=fps)


@TOY_STEPS.register("scale", reads="train")
def scale(ctx: StepContext, state: DataState) -> StepResult:
    source = train_data(state)
    mean, std = float(source["x"].mean()), float(source["x"].std()) or 1.0

    def scaled(part: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**part, "x": (part["x"] - mean) / std}

    if state.parts:
        state = replace(state, parts={name: scaled(part) for name, part in state.parts.items()})
    else:
        state = replace(state, data=scaled(state.data))
    output = fingerprint("scale", dict(ctx.inputs), mean, std)
    return StepResult(replace(state, statistics={"mean": mean, "std": std}), output=output)


@TOY_STEPS.register("shard", needs=("scale",), makes="shard", per_rank=True)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    train = state.parts["train"]
    rows = len(train["x"]) // ctx.world_size
    mine = {k: v[ctx.rank * rows : (ctx.rank + 1) * rows] for k, v in train.items()}
    output = fingerprint("shard", dict(ctx.inputs), ctx.rank, ctx.world_size)
    return StepResult(
        replace(state, parts={**state.parts, "train": mine}),
        output=output,
        stats={"length": rows, "dropped": len(train["x"]) - rows * ctx.world_size},
    )


class ToyPreparation(Preparation):
    """The toy pipeline's preparation: arrays in ``.npz`` files, a manifest last."""

    def plain_config(self, arguments: Mapping[str, Any]) -> ToyConfig:
        return ToyConfig.from_arguments(arguments)  # type: ignore[return-value]

    def order_of(
        self,
        config: Any,
        order: Sequence[str] | str | None,
        enforce: bool = True,
        pipeline: Pipeline | None = None,
        owner: str = "ToyDataModule",
    ) -> tuple[str, ...]:
        chosen = TOY_PIPELINE if pipeline is None else pipeline
        return resolve_order(order, TOY_STEPS, chosen, config, enforce=enforce, final="shard", owner=owner)

    def cache_key(self, config: Any, order: Sequence[str]) -> str:
        return fingerprint(NAME, config.rows, config.seed, list(order))

    def prepare_into(
        self, folder: Path, config: Any, order: Sequence[str], hooks: Mapping[str, Any] | None = None
    ) -> None:
        identity = {"cache_key": self.cache_key(config, order), "pipeline": NAME}

        def write(state: DataState, ledger: StepLedger) -> None:
            for name, part in state.parts.items():
                np.savez(folder / f"{name}.npz", **part)
            ledger.info["dims"] = {"num_inputs": 1}
            ledger.info["data_fingerprints"] = {"manifest": ledger.fingerprint}
            ledger.info["files"] = file_records(folder, skip=(MANIFEST_NAME, TEMP_MARKER, "work"))
            ledger.save(folder)

        run_preparation(folder, StepContext(config), order, TOY_STEPS, identity, write)


PREPARATION = ToyPreparation()


TOY_SPEC = PipelineSpec(
    name=NAME,
    pipeline=TOY_PIPELINE,
    dims=("num_inputs",),
    datamodule=f"{HERE}:ToyDataModule",
    model=f"{HERE}:ToyRegressor",
    config=f"{HERE}:ToyConfig",
    preparation=f"{HERE}:PREPARATION",
    steps=f"{HERE}:TOY_STEPS",
    title="toy regression",
)
# Registered before its DataModule class is defined: the base gives that class its dims' properties.
register(TOY_SPEC)


class ToyDataModule(OrderedDataModuleBase):
    """The toy pipeline's DataModule: only what differs from the engine's base."""

    pipeline_name = NAME

    def __init__(
        self,
        rows: int = 96,
        batch_size: int = 16,
        cache_dir: str | None = None,
        order: Sequence[str] | None = None,
        enforce: bool = True,
    ) -> None:
        super().__init__()
        self._configure(
            {
                "rows": rows,
                "batch_size": batch_size,
                "cache_dir": cache_dir,
                "order": order,
                "enforce": enforce,
            }
        )

    def _read_prepared(self, path: Path, ledger: StepLedger) -> DataState:
        parts = {name: dict(np.load(path / f"{name}.npz")) for name in ("train", "val")}
        return DataState(parts=parts, form="rows")

    def _assign(self, state: DataState, ledger: StepLedger) -> None:
        self._train, self._val = _Rows(state.parts["train"]), _Rows(state.parts["val"])

    def _serve(self, train: Any) -> Any:
        return self._train

    def _collate(self) -> Any:
        return None  # the default collate stacks the rows' dicts


class _Rows(torch.utils.data.Dataset):
    def __init__(self, columns: Mapping[str, np.ndarray]) -> None:
        self.x = torch.as_tensor(columns["x"]).float().unsqueeze(1)
        self.y = torch.as_tensor(columns["y"]).float().unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "y": self.y[index]}


class ToyRegressor(pl.LightningModule):
    """A line fitted to the data, built from the data's dims."""

    def __init__(self, num_inputs: int) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features = torch.nn.Linear(num_inputs, 1)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.features(batch["x"]), batch["y"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self.features(batch["x"]), batch["y"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


# Collected with every other test module: the registry is left as the library has it until this
# module's tests run (the fixture below registers the spec for them).
unregister(NAME)


@pytest.fixture(autouse=True, scope="module")
def registered() -> Iterator[PipelineSpec]:
    register(TOY_SPEC, replace=True)  # again, after an earlier module's teardown
    yield TOY_SPEC
    unregister(NAME)  # the other tests see the library's pipelines only


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("toy"))


def test_the_spec_is_registered_from_outside_and_found_by_name_class_and_ledger(cache_dir: str) -> None:
    assert PIPELINES[NAME] is TOY_SPEC and TOY_SPEC.preparer() is PREPARATION
    dm = ToyDataModule(cache_dir=cache_dir)
    dm.prepare_data()
    assert descriptor_for(classes=[ToyDataModule]) is TOY_SPEC is descriptor_for(ledger=dm.ledger)
    assert dm.num_inputs == 1  # the dim property the base gives every pipeline's DataModule
    assert TOY_SPEC.check(dm.ledger) == []
    with pytest.raises(ValueError, match="registered already"):
        register(replace(TOY_SPEC, title="another"))


def test_a_datamodule_of_an_unregistered_pipeline_is_refused_when_its_class_is_defined() -> None:
    with pytest.raises(KeyError, match=r"call lightning_order.register\(spec\) before defining the class"):

        class Unregistered(OrderedDataModuleBase):
            pipeline_name = "never_registered"


def test_audit_and_graph_read_the_prepared_cache(cache_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    dm = ToyDataModule(cache_dir=cache_dir)
    dm.prepare_data()
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
    dm = ToyDataModule(cache_dir=cache_dir, order=("load", "scale", "split", "shard"), enforce=False)
    dm.prepare_data()
    assert main(["audit", str(dm.cache_path)]) == 1
    assert "fit-before-split" in capsys.readouterr().out
    manifest = json.loads((dm.cache_path / MANIFEST_NAME).read_text())
    assert manifest["info"]["pipeline"] == NAME


def test_fit_with_the_validator_is_silent_on_a_correct_run(cache_dir: str) -> None:
    dm = ToyDataModule(cache_dir=cache_dir)
    model = ToyRegressor(**dm.dims)
    trainer = quiet_trainer(
        None, [OrderValidator()], max_epochs=1, limit_train_batches=3, limit_val_batches=2
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
    assert not [w for w in caught if issubclass(w.category, OrderWarning)]
    assert trainer.global_step == 3
    assert {"init_model", "train"} <= set(dm.ledger.steps())


def test_the_validator_stops_a_planted_order_error_before_step_one(cache_dir: str) -> None:
    dm = ToyDataModule(cache_dir=cache_dir, order=("load", "scale", "split", "shard"), enforce=False)
    trainer = quiet_trainer(
        None, [OrderValidator()], max_epochs=1, limit_train_batches=3, limit_val_batches=2
    )
    with pytest.raises(OrderError) as caught:
        trainer.fit(ToyRegressor(**dm.dims), dm)
    assert "fit-before-split" in caught.value.rules and trainer.global_step == 0
    with pytest.raises(OrderError) as refused:
        ToyDataModule(cache_dir=cache_dir, order=("load", "scale", "split", "shard"))
    assert refused.value.rules == ["fit-before-split"]

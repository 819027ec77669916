"""A pipeline of your own, written against the public API only: ``load → split → scale → shard``.

A toy regression (``y = 2x + 1``) in one module: its config, its steps (``scale`` is a step of its
own: it learns a mean and a standard deviation from the train split), its preparation, its
DataModule and its model, admitted with :func:`lightning_order.register`. From then on the
library treats it like its own pipelines: ``OrderValidator`` proves its order before step 1,
``lightning-order fit`` / ``prepare`` run it, ``audit`` and ``graph`` read its cache.

Run it (``examples/`` on the import path)::

    PYTHONPATH=examples lightning-order fit --model toy_regression.ToyRegressor \\
        --data toy_regression.ToyDataModule --trainer.max_steps 3
    lightning-order audit ~/.cache/lightning_order/<cache key>
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from lightning_order import (
    STANDARD_PIPELINE,
    BaseDataConfig,
    CheckEvidence,
    DataState,
    OrderedDataModuleBase,
    Pipeline,
    PipelinePreparation,
    PipelineSpec,
    Rule,
    Step,
    StepContext,
    StepLedger,
    StepRegistry,
    StepResult,
    Violation,
    fingerprint,
    register,
    register_check,
    train_data,
    unregister_check,
)

NAME = "toy_regression"

#: The order, stated once: each step's kind and what must run before it. The model and loop steps
#: are the library's; the validator records them at the Lightning hooks where they happen.
TOY_PIPELINE = Pipeline(
    [
        Step("load", (), "source", "draw (x, y) pairs"),
        Step("split", ("load",), "partition", "train/validation, every fourth row to validation"),
        Step("scale", ("split",), "fitted", "standardise x with the train split's statistics"),
        Step("shard", ("scale",), "partition", "this rank's rows"),
        Step("init_model", ("scale",), "model", "build the model from the data's dims"),
        *(STANDARD_PIPELINE[name] for name in ("configure_optimizers", "train", "evaluate")),
    ]
)
TOY_STEPS = StepRegistry(TOY_PIPELINE)


@dataclass(frozen=True)
class ToyConfig(BaseDataConfig):
    """The toy pipeline's arguments: the base's, plus how many rows to draw."""

    rows: int = 96
    """rows drawn by ``load``."""


# -- the steps: plain functions of (context, state), each declared once --------------------------
@TOY_STEPS.register("load", takes=None, makes="rows", reads="none", writes_data=True)
def load(ctx: StepContext, state: DataState) -> StepResult:
    """Draws ``rows`` pairs from the seed."""
    x = np.random.default_rng(ctx.config.seed).normal(5.0, 3.0, size=ctx.config.rows).astype(np.float32)
    output = fingerprint("load", ctx.config.rows, ctx.config.seed)
    return StepResult(replace(state, data={"x": x, "y": 2.0 * x + 1.0}), output=output)


@TOY_STEPS.register("split", writes_data=True, partitions=("train", "val"))
def split(ctx: StepContext, state: DataState) -> StepResult:
    """Every fourth row to validation (a real pipeline splits by a hash of each row's key)."""
    val = np.arange(len(state.data["x"])) % 4 == 0
    parts = {
        name: {k: v[mask] for k, v in state.data.items()} for name, mask in (("train", ~val), ("val", val))
    }
    output = fingerprint("split", ctx.inputs)
    fps = {name: fingerprint(output, name) for name in parts}
    return StepResult(replace(state, data=None, parts=parts), output=output, parts=fps)


@TOY_STEPS.register("scale", reads="train")
def scale(ctx: StepContext, state: DataState) -> StepResult:
    """Standardises ``x`` with the mean and standard deviation of the data it learns from."""
    source = train_data(state)  # the train split; the whole data if a planted order runs it first
    mean, std = float(source["x"].mean()), float(source["x"].std()) or 1.0

    def scaled(part: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**part, "x": (part["x"] - mean) / std}

    if state.parts:
        state = replace(state, parts={name: scaled(part) for name, part in state.parts.items()})
    else:
        state = replace(state, data=scaled(state.data))
    output = fingerprint("scale", ctx.inputs, mean, std)
    # What it learnt travels in the state's `extra` (a pipeline with more to carry subclasses
    # DataState and names its class in its StepRegistry(state=...)).
    return StepResult(replace(state, extra={**state.extra, "statistics": {"mean": mean, "std": std}}), output=output)


@TOY_STEPS.register("shard", needs=("scale",), makes="shard", per_rank=True)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """This rank's equal share of the train rows (runs in ``setup``, on every rank)."""
    train = state.parts["train"]
    rows = len(train["x"]) // ctx.world_size
    mine = {k: v[ctx.rank * rows : (ctx.rank + 1) * rows] for k, v in train.items()}
    output = fingerprint("shard", ctx.inputs, ctx.rank, ctx.world_size)
    stats = {"length": rows, "dropped": len(train["x"]) - rows * ctx.world_size}
    return StepResult(replace(state, parts={**state.parts, "train": mine}), output=output, stats=stats)


# -- a validator check of its own -------------------------------------------------------------------
CHECK_NAME = "toy-x-standardised"
X_NOT_STANDARDISED = Rule(
    "the toy pipeline's x is not standardised in the rows the model is trained on",
    "the line is fitted to raw x: slow, step-size-sensitive training, and a model that expects "
    "scaled inputs at serving time gets raw ones",
    "serve the rows `scale` wrote (run prepare again; do not transform x after it)",
)


def x_standardised(evidence: CheckEvidence) -> list[Violation]:
    """A pure judge of the sampled train rows: ``scale`` left x with a mean near 0 (|mean| < 1)."""
    batch = evidence.samples.get("train")
    if not isinstance(evidence.datamodule, ToyDataModule) or not isinstance(batch, Mapping):
        return []  # another pipeline's run, or no rows sampled: nothing to judge
    mean = float(batch["x"].float().mean())
    if abs(mean) < 1.0:
        return []
    return [Violation("x-not-standardised", ("scale",), f"the sampled train rows' x has mean {mean:.2f}")]


def register_toy_check() -> None:
    """Registers :func:`x_standardised` with the validator (again, when this module is imported again)."""
    try:
        unregister_check(CHECK_NAME)
    except KeyError:
        pass
    register_check(
        CHECK_NAME,
        x_standardised,
        phase="setup",
        reads=["samples"],
        rules={"x-not-standardised": X_NOT_STANDARDISED},
    )


# -- the preparation: where the prepared files go; order, cache key and manifest come from the base
class ToyPreparation(PipelinePreparation):
    """Arrays in ``.npz`` files (the base writes the manifest after them)."""

    def write(self, folder: Path, state: DataState, ledger: StepLedger) -> dict[str, Any]:
        """Saves each part; returns the dims the model is built from."""
        for name, part in state.parts.items():
            np.savez(folder / f"{name}.npz", **part)
        return {"num_inputs": 1}


PREPARATION = ToyPreparation(NAME, ToyConfig, TOY_STEPS)

TOY_SPEC = register(
    PipelineSpec(
        name=NAME,
        pipeline=TOY_PIPELINE,
        dims=("num_inputs",),
        datamodule=f"{__name__}:ToyDataModule",
        model=f"{__name__}:ToyRegressor",
        config=f"{__name__}:ToyConfig",
        preparation=f"{__name__}:PREPARATION",
        steps=f"{__name__}:TOY_STEPS",
        files=("train.npz", "val.npz"),
        title="toy regression",
    ),
    replace=True,  # importing this module again (a test's reload) registers the same pipeline
)


# -- the DataModule: what differs from the base (registered first: the base gives it its dims) ------
class ToyDataModule(OrderedDataModuleBase):
    """The toy pipeline's DataModule; ``dm.num_inputs`` (a dim) comes from the base."""

    pipeline_name = NAME

    def __init__(
        self,
        rows: int = 96,
        batch_size: int = 16,
        seed: int = 0,
        cache_dir: str | None = None,
        order: list[str] | None = None,
        enforce: bool = True,
    ) -> None:
        """See :class:`ToyConfig` and :class:`~lightning_order.BaseDataConfig` for the arguments."""
        super().__init__()
        self.save_hyperparameters()
        self.configure(dict(self.hparams))  # the config, the order (checked) and the cache key

    def read_prepared(self, path: Path, ledger: StepLedger) -> DataState:
        """The parts as ``prepare_data`` saved them (``setup`` runs ``shard`` on them)."""
        return DataState(
            parts={name: dict(np.load(path / f"{name}.npz")) for name in ("train", "val")}, form="rows"
        )

    def to_dataset(self, data: Mapping[str, np.ndarray]) -> torch.utils.data.Dataset:
        """Rows of ``{"x", "y"}`` tensors."""
        x, y = (torch.as_tensor(data[k]).float().unsqueeze(1) for k in ("x", "y"))
        return torch.utils.data.StackDataset(x=x, y=y)


class ToyRegressor(pl.LightningModule):
    """A line fitted to the data, built from the data's dims."""

    def __init__(self, num_inputs: int = 1, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features, self.lr = torch.nn.Linear(num_inputs, 1), lr

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.features(batch["x"]), batch["y"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self.features(batch["x"]), batch["y"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


register_toy_check()

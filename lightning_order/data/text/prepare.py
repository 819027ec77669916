"""The preparation itself, as functions of a :class:`~.config.DataConfig`: order, cache key, run.

:class:`~.datamodule.OrderedDataModule` calls these, and so does the light ``lightning-order
prepare`` (:mod:`lightning_order.cli.dispatch`), which builds the config from the YAML's ``data:``
section without importing torch or Lightning: both compute the same order, the same cache key and
the same prepared folder, because both go through this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine import cache as _cache
from lightning_order.data.engine.runner import StepContext, resolve_order, run_preparation
from lightning_order.data.text.artefacts import write_prepared
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.features import ENGINEERED_FEATURES
from lightning_order.data.text.steps import STEPS
from lightning_order.ledger import fingerprint
from lightning_order.order import STANDARD_PIPELINE

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.order import Pipeline

__all__ = [
    "FINAL_FORM",
    "cache_key",
    "feature_names",
    "order_of",
    "plain_config",
    "prepare_cache",
    "prepare_into",
]

#: The data form a runnable order must leave: every rank holds its shard.
FINAL_FORM = "shard"


def plain_config(arguments: Mapping[str, Any]) -> DataConfig:
    """The config a plain :class:`~lightning_order.OrderedDataModule` builds from ``arguments`` (no subclass)."""
    return DataConfig.from_arguments(arguments, engineered_features=ENGINEERED_FEATURES, overrides={})


def order_of(
    config: DataConfig,
    order: Sequence[str] | str | None,
    enforce: bool = True,
    pipeline: Pipeline | None = None,
    owner: str = "OrderedDataModule",
) -> tuple[str, ...]:
    """The data steps to run (see :func:`~.steps.resolve_order`): the mandated ones, or ``order`` checked."""
    chosen = STANDARD_PIPELINE if pipeline is None else pipeline
    return resolve_order(order, STEPS, chosen, config, enforce=enforce, final=FINAL_FORM, owner=owner)


def cache_key(config: DataConfig, order: Sequence[str]) -> str:
    """The pipeline fingerprint naming the cache folder: the hash of everything that shapes the data."""
    return fingerprint("lightning_order.data", config.identity(order))


def feature_names(config: DataConfig, order: Sequence[str]) -> list[str]:
    """The feature vector's columns: the numeric columns, then the engineered ones (if they run)."""
    engineered = list(config.engineered_features) if "engineer_features" in order else []
    return [*config.numeric_columns, *engineered]


def prepare_into(
    folder: Path,
    config: DataConfig,
    order: Sequence[str],
    hooks: Mapping[str, Any] | None = None,
) -> None:
    """Runs the steps of ``order`` before the first per-rank one and writes the cache into ``folder``."""
    names = feature_names(config, order)
    identity = {
        "cache_key": cache_key(config, order),
        "pipeline": "standard",
        "config": config.identity(order),
    }
    ctx = StepContext(config, hooks=dict(hooks or {}), feature_names=tuple(names))
    dims = {"num_features": len(names), "max_length": config.max_length}
    run_preparation(
        folder,
        ctx,
        order,
        STEPS,
        {**identity, "feature_names": names},
        lambda state, ledger: write_prepared(folder, state, ledger, dims),
    )


def prepare_cache(
    root: Path, config: DataConfig, order: Sequence[str], hooks: Mapping[str, Any] | None = None
) -> Path:
    """Prepares ``config`` into ``root/<cache key>`` unless an intact cache is there; returns the folder."""
    key = cache_key(config, order)
    _cache.build_once(
        root, key, lambda folder: prepare_into(folder, config, order, hooks), lock_timeout=config.lock_timeout
    )
    return root / key

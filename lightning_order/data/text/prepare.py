"""The preparation itself, as :class:`TextPreparation` of a :class:`~.config.DataConfig`: order, cache key, run.

:class:`~.datamodule.OrderedDataModule` calls :data:`PREPARATION` (the text spec's), and so does the light ``lightning-order
prepare`` (:mod:`lightning_order.cli.dispatch`), which builds the config from the YAML's ``data:``
section without importing torch or Lightning: both compute the same order, the same cache key and
the same prepared folder, because both go through this object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine.runner import StepContext, resolve_order, run_preparation
from lightning_order.data.text.artefacts import write_prepared
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.features import ENGINEERED_FEATURES
from lightning_order.data.text.spec import TEXT_SPEC
from lightning_order.data.text.steps import STEPS
from lightning_order.ledger import fingerprint
from lightning_order.spec import Preparation

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.order import Pipeline

__all__ = [
    "FINAL_FORM",
    "PREPARATION",
    "TextPreparation",
    "cache_key",
    "feature_names",
    "order_of",
    "plain_config",
    "prepare_cache",
    "prepare_into",
]

#: The data form a runnable order must leave: every rank holds its shard.
FINAL_FORM = "shard"


def feature_names(config: DataConfig, order: Sequence[str]) -> list[str]:
    """The feature vector's columns: the numeric columns, then the engineered ones (if they run)."""
    engineered = list(config.engineered_features) if "engineer_features" in order else []
    return [*config.numeric_columns, *engineered]


class TextPreparation(Preparation):
    """The text-classification pipeline's :class:`~lightning_order.spec.Preparation`."""

    def plain_config(self, arguments: Mapping[str, Any]) -> DataConfig:
        """The config a plain :class:`~lightning_order.OrderedDataModule` builds from ``arguments`` (no subclass)."""
        return DataConfig.from_arguments(arguments, engineered_features=ENGINEERED_FEATURES, overrides={})

    def order_of(
        self,
        config: DataConfig,
        order: Sequence[str] | str | None,
        enforce: bool = True,
        pipeline: Pipeline | None = None,
        owner: str = "OrderedDataModule",
    ) -> tuple[str, ...]:
        """The data steps to run (see :func:`~lightning_order.data.engine.runner.resolve_order`)."""
        chosen = TEXT_SPEC.pipeline if pipeline is None else pipeline
        return resolve_order(order, STEPS, chosen, config, enforce=enforce, final=FINAL_FORM, owner=owner)

    def cache_key(self, config: DataConfig, order: Sequence[str]) -> str:
        """The pipeline fingerprint naming the cache folder: the hash of everything that shapes the data."""
        return fingerprint("lightning_order.data", config.identity(order))

    def prepare_into(
        self, folder: Path, config: DataConfig, order: Sequence[str], hooks: Mapping[str, Any] | None = None
    ) -> None:
        """Runs the steps of ``order`` before the first per-rank one and writes the cache into ``folder``."""
        names = feature_names(config, order)
        identity = {
            "cache_key": self.cache_key(config, order),
            "pipeline": TEXT_SPEC.name,
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


#: The text spec's preparation (:attr:`~lightning_order.spec.PipelineSpec.preparation`).
PREPARATION = TextPreparation()
# The module-level names older callers import.
plain_config = PREPARATION.plain_config
order_of = PREPARATION.order_of
cache_key = PREPARATION.cache_key
prepare_into = PREPARATION.prepare_into
prepare_cache = PREPARATION.prepare_cache

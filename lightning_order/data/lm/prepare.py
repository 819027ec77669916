"""The LM preparation itself, as :class:`LMPreparation` of an :class:`~.config.LMConfig`: order, cache key, run.

:class:`~.datamodule.OrderedLMDataModule` calls :data:`PREPARATION` (the LM spec's), and so does
the light ``lightning-order prepare`` (no torch, no Lightning): both compute the same order, the
same cache key and the same prepared folder, because both go through this object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine.engines import make_engine
from lightning_order.data.engine.runner import StepContext, resolve_order, run_preparation
from lightning_order.data.lm.artefacts import write_lm_prepared
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.spec import LM_SPEC
from lightning_order.data.lm.steps import LM_STEPS
from lightning_order.errors import OrderError
from lightning_order.ledger import fingerprint
from lightning_order.spec import Preparation

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.order import Pipeline

__all__ = [
    "FINAL_FORM",
    "PREPARATION",
    "LMPreparation",
    "cache_key",
    "order_of",
    "plain_config",
    "prepare_cache",
    "prepare_into",
]

#: The data form a runnable order must leave: every rank holds its blocks.
FINAL_FORM = "shard"


class LMPreparation(Preparation):
    """The LM pipeline's :class:`~lightning_order.spec.Preparation`."""

    def plain_config(self, arguments: Mapping[str, Any]) -> LMConfig:
        """The config a plain :class:`~lightning_order.OrderedLMDataModule` builds from ``arguments``."""
        return LMConfig.from_arguments(arguments)

    def order_of(
        self,
        config: LMConfig,
        order: Sequence[str] | str | None,
        enforce: bool = True,
        pipeline: Pipeline | None = None,
        owner: str = "OrderedLMDataModule",
    ) -> tuple[str, ...]:
        """The LM data steps to run: the mandated ones, or ``order`` checked; the spec's config checks when enforced.

        Raises:
            DataError: the order cannot run at all.
            OrderError: ``enforce`` and the order breaks :data:`~lightning_order.LM_PIPELINE`, or
                the config breaks the LM spec (``eos=False``: ``pack-without-eos``).
        """
        chosen = LM_SPEC.pipeline if pipeline is None else pipeline
        steps = resolve_order(order, LM_STEPS, chosen, config, enforce=enforce, final=FINAL_FORM, owner=owner)
        refused = LM_SPEC.check_config(config, owner) if enforce else []
        if refused:
            raise OrderError(
                refused,
                header=f"{owner}'s config breaks the LM pipeline; pass enforce=False to run it anyway:",
            )
        return steps

    def cache_key(self, config: LMConfig, order: Sequence[str]) -> str:
        """The pipeline fingerprint naming the cache folder: the hash of everything that shapes the data."""
        return fingerprint("lightning_order.lm", config.identity(order))

    def prepare_into(
        self, folder: Path, config: LMConfig, order: Sequence[str], hooks: Mapping[str, Any] | None = None
    ) -> None:
        """Runs the steps of ``order`` before the first per-rank one and writes the cache into ``folder``."""
        identity = {
            "cache_key": self.cache_key(config, order),
            "pipeline": LM_SPEC.name,
            "config": config.identity(order),
        }
        engine = make_engine(config.engine, config.num_proc, config.ray_address)
        try:
            run_preparation(
                folder,
                StepContext(config, hooks=dict(hooks or {}), engine=engine),
                order,
                LM_STEPS,
                identity,
                lambda state, ledger: write_lm_prepared(folder, state, ledger, config, engine),
            )
        finally:
            engine.close()


#: The LM spec's preparation (:attr:`~lightning_order.spec.PipelineSpec.preparation`).
PREPARATION = LMPreparation()
# The module-level names older callers import.
plain_config = PREPARATION.plain_config
order_of = PREPARATION.order_of
cache_key = PREPARATION.cache_key
prepare_into = PREPARATION.prepare_into
prepare_cache = PREPARATION.prepare_cache

"""The LM preparation itself, as functions of an :class:`~.config.LMConfig`: order, cache key, run.

:class:`~.datamodule.OrderedLMDataModule` calls these, and so does the light ``lightning-order
prepare`` (no torch, no Lightning): both compute the same order, the same cache key and the same
prepared folder, because both go through this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine import cache as _cache
from lightning_order.data.engine.engines import make_engine
from lightning_order.data.engine.runner import StepContext, resolve_order, run_preparation
from lightning_order.data.lm.artefacts import write_lm_prepared
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.steps import LM_STEPS
from lightning_order.errors import OrderError
from lightning_order.ledger import fingerprint
from lightning_order.order import LM_PIPELINE
from lightning_order.rules import Violation

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.order import Pipeline

__all__ = ["FINAL_FORM", "cache_key", "order_of", "plain_config", "prepare_cache", "prepare_into"]

#: The data form a runnable order must leave: every rank holds its blocks.
FINAL_FORM = "shard"


def plain_config(arguments: Mapping[str, Any]) -> LMConfig:
    """The config a plain :class:`~lightning_order.OrderedLMDataModule` builds from ``arguments``."""
    return LMConfig.from_arguments(arguments)


def order_of(
    config: LMConfig,
    order: Sequence[str] | str | None,
    enforce: bool = True,
    pipeline: Pipeline | None = None,
    owner: str = "OrderedLMDataModule",
) -> tuple[str, ...]:
    """The LM data steps to run: the mandated ones, or ``order`` checked; ``eos=False`` is refused when enforced.

    Raises:
        DataError: the order cannot run at all.
        OrderError: ``enforce`` and the order breaks :data:`~lightning_order.LM_PIPELINE`, or
            ``eos=False`` (``pack-without-eos``).
    """
    chosen = LM_PIPELINE if pipeline is None else pipeline
    steps = resolve_order(order, LM_STEPS, chosen, config, enforce=enforce, final=FINAL_FORM, owner=owner)
    if not config.eos and enforce:
        raise OrderError(
            [
                Violation(
                    "pack-without-eos",
                    ("pack", "encode"),
                    f"{owner}(eos=False) would concatenate documents without an end-of-text token",
                )
            ],
            header=f"{owner}(eos=False) breaks the LM pipeline; pass enforce=False to run it anyway:",
        )
    return steps


def cache_key(config: LMConfig, order: Sequence[str]) -> str:
    """The pipeline fingerprint naming the cache folder: the hash of everything that shapes the data."""
    return fingerprint("lightning_order.lm", config.identity(order))


def prepare_into(
    folder: Path, config: LMConfig, order: Sequence[str], hooks: Mapping[str, Any] | None = None
) -> None:
    """Runs the steps of ``order`` before the first per-rank one and writes the cache into ``folder``."""
    identity = {"cache_key": cache_key(config, order), "pipeline": "lm", "config": config.identity(order)}
    engine = make_engine(config.engine, config.num_proc, config.ray_address)
    try:
        run_preparation(
            folder,
            StepContext(config, hooks=dict(hooks or {}), engine=engine),
            order,
            LM_STEPS,
            identity,
            lambda state, ledger: write_lm_prepared(folder, state, ledger, config),
        )
    finally:
        engine.close()


def prepare_cache(
    root: Path, config: LMConfig, order: Sequence[str], hooks: Mapping[str, Any] | None = None
) -> Path:
    """Prepares ``config`` into ``root/<cache key>`` unless an intact cache is there; returns the folder."""
    key = cache_key(config, order)
    _cache.build_once(
        root, key, lambda folder: prepare_into(folder, config, order, hooks), lock_timeout=config.lock_timeout
    )
    return root / key

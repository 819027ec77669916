"""What every pipeline's ``shard`` step does and records under the global order (docs/architecture.md, "The train order and the position").

The step decides this rank's :class:`~lightning_order.positions.GlobalOrder` from its context
(the data-parallel size and rank, :mod:`lightning_order.parallelism`) and config (``batch_size``, ``seed``, ``shuffle``), refuses a split that cannot
fill one global batch, and records one ``shard`` record whose fields both pipelines share:
``params`` (``layout="global-batch"``, ``batch_size``, ``global_batch``, ``seed``, ``shuffle``) and
``stats`` (``length``: samples this rank reads per epoch, ``world_size``, ``dropped``: samples per
epoch that do not fill a global batch, ``start``: this rank's offset in every global batch,
``global_batch``, ``epoch_batches``). The validator's rank checks compare ``length`` across ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_order.data.engine.runner import StepContext
from lightning_order.ledger import fingerprint
from lightning_order.positions import GlobalOrder

__all__ = ["ShardPlan", "plan_shard"]


@dataclass(frozen=True)
class ShardPlan:
    """One rank's shard under the global order: the rule, and the ``shard`` record's fields."""

    order: GlobalOrder
    output: str
    params: dict[str, Any]
    stats: dict[str, Any]


def plan_shard(
    ctx: StepContext, size: int, upstream: str, name: str = "shard", what: str = "rows"
) -> ShardPlan:
    """This rank's shard of a train split of ``size`` samples (``what``: "rows", "blocks").

    Args:
        ctx: the step's context (rank, world size, config).
        size: samples in the whole train split.
        upstream: the fingerprint the step consumes (``encode``'s or ``pack``'s).
        name: the fingerprint's prefix (each pipeline keeps its own).
        what: what a sample is called in the error.

    Raises:
        DataError: the split cannot fill one global batch of ``world_size × batch_size``.
    """
    cfg = ctx.config
    order = GlobalOrder(size, int(cfg.batch_size), ctx.world_size, ctx.rank, int(cfg.seed), bool(cfg.shuffle))
    order.require_one_batch(what)
    params = {
        "layout": "global-batch",
        "batch_size": order.batch_size,
        "global_batch": order.global_batch,
        "seed": order.seed,
        "shuffle": order.shuffle,
    }
    stats = {
        "length": order.length,
        "world_size": ctx.world_size,
        "dropped": order.dropped,
        "start": ctx.rank * order.batch_size,
        "global_batch": order.global_batch,
        "epoch_batches": order.epoch_batches,
    }
    output = fingerprint(name, ctx.fingerprint or upstream, ctx.rank, ctx.world_size, params)
    return ShardPlan(order, output, params, stats)

"""The LM step ``shard`` (in ``setup``, per rank): this rank's part of every global batch of blocks.

Every rank gets the same number of blocks (:mod:`lightning_order.data.engine.sharding`); the
rank's ``train`` part is a :class:`BlockView` of the shared block file (no copy until read).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.engine.sharding import plan_shard
from lightning_order.data.lm.blocks import stride_shard
from lightning_order.data.lm.mixture import mixture_index
from lightning_order.data.lm.registry import LM_STEPS
from lightning_order.positions import GlobalOrder, epoch_order

__all__ = ["BlockView", "mixed_blocks", "served_shares", "shard"]


@dataclass(frozen=True)
class BlockView:
    """Some blocks of a block array: rows ``index`` of ``blocks`` (no copy until a batch is read)."""

    blocks: Any
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.blocks[self.index])
        return out if dtype is None else out.astype(dtype)


@LM_STEPS.register(
    "shard",
    takes=frozenset({"packed"}),
    makes="shard",
    consumes=("pack",),
    reads="none",
    writes_data=True,
    per_rank=True,
)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """(In ``setup``, on every rank) this rank's part of every global batch of the global block order.

    The loader reads the whole block file by index (``extra["served"]``); the rank's ``train``
    part is the blocks it reads in the first epoch (equal counts on every rank).
    """
    train = state.parts["train"]
    mixture = state.extra.get("mixture")
    served = train if mixture is None else mixed_blocks(train, mixture)
    if len(served) < ctx.world_size:  # the message of earlier versions, which users match on
        stride_shard(len(served), ctx.world_size, ctx.rank)
    plan = plan_shard(ctx, len(served), ctx.inputs["pack"], name="lm-shard", what="blocks")
    extra = {**state.extra, "served": served, "global_order": plan.order}
    first = plan.order.rank_indices(0)
    mine = BlockView(train, first if mixture is None else served.index[first])
    params, stats = plan.params, plan.stats
    if mixture is not None:  # what the epoch really serves, and the tolerance it is judged by now
        params = {**params, "mixture_tolerance": float(ctx.config.mixture_tolerance)}
        stats = {**stats, "mixture_shares": served_shares(served.index, mixture["train_blocks"], plan.order)}
    return StepResult(
        replace(state, parts={**state.parts, "train": mine}, extra=extra),
        plan.output,
        params=params,
        stats=stats,
    )


def mixed_blocks(train: Any, mixture: dict[str, Any]) -> BlockView:
    """A mixture's train split as served: the drawn rows of the block file (:func:`~.mixture.mixture_index`)."""
    index = mixture_index(mixture["train_blocks"], mixture["drawn_blocks"], mixture["seed"])
    return BlockView(train, index)


def served_shares(index: np.ndarray, blocks: list[int], order: GlobalOrder) -> list[float]:
    """Each source's share of the blocks the first epoch serves (whole global batches of the drawn order)."""
    rows = index[epoch_order(order.size, order.seed, 0, order.shuffle)[: order.epoch_samples]]
    owners = np.searchsorted(np.cumsum(blocks), rows, side="right")
    counts = np.bincount(owners, minlength=len(blocks))
    return [float(c) / len(rows) if len(rows) else 0.0 for c in counts.tolist()]

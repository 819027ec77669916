"""The LM step ``shard`` (in ``setup``, per rank): this rank's part of every global batch of blocks.

Every rank gets the same number of blocks (:mod:`lightning_order.data.engine.sharding`); the
rank's ``train`` part is a :class:`BlockView` of the split's blocks (nothing read or computed until asked).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.engine.sharding import plan_shard
from lightning_order.data.lm.blocks import stride_shard
from lightning_order.data.lm.mixture import MixedOrder, mixed_order
from lightning_order.data.lm.registry import LM_STEPS
from lightning_order.positions import GlobalOrder

__all__ = ["BlockView", "shard"]


@dataclass(frozen=True)
class BlockView:
    """Some blocks of a block array: rows ``index`` of ``blocks``, or the rows ``order`` gives this rank in its first epoch.

    No copy until a batch is read; with ``order``, not even the row numbers are held until asked (:meth:`rows`).
    """

    blocks: Any
    index: np.ndarray | None = None
    order: GlobalOrder | None = None

    def rows(self) -> np.ndarray:
        """The row numbers in ``blocks`` (computed from ``order`` when no ``index`` was given).

        Raises:
            ValueError: neither ``index`` nor ``order`` was given.
        """
        if self.index is not None:
            return self.index
        if self.order is None:
            raise ValueError("a BlockView needs index or order")
        return self.order.rank_indices(0)

    def __len__(self) -> int:
        if self.index is None and self.order is not None:
            return self.order.length
        return len(self.rows())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.blocks[self.rows()])
        return out if dtype is None else out.astype(dtype)


@LM_STEPS.register(
    "shard",
    takes=frozenset({"packed"}),
    makes="shard",
    consumes=("pack",),
    reads="none",
    writes_data=True,
    per_rank=True,
    config=("batch_size", "seed", "shuffle", "mixture_tolerance"),
)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """(In ``setup``, on every rank) this rank's part of every global batch of the global block order.

    The loader reads the whole block file by index (``extra["served"]``); the rank's ``train``
    part is the blocks it reads in the first epoch (equal counts on every rank).
    """
    train = state.parts["train"]
    if len(train) < ctx.world_size:  # the message of earlier versions, which users match on
        stride_shard(len(train), ctx.world_size, ctx.rank)
    plan = plan_shard(ctx, len(train), ctx.inputs["pack"], name="lm-shard", what="blocks")
    mixture = state.extra.get("mixture")
    # a mixture: the same positions, read through each epoch's draw by weight (data/lm/mixture.py)
    order = plan.order if mixture is None else mixed_order(plan.order, mixture)
    extra = {**state.extra, "served": train, "global_order": order}
    params, stats = plan.params, plan.stats
    if isinstance(order, MixedOrder):  # what the first epoch serves, and the tolerance it is judged by now
        params = {**params, "mixture_tolerance": float(ctx.config.mixture_tolerance)}
        stats = {**stats, "mixture_shares": order.shares(0)}
    return StepResult(
        replace(state, parts={**state.parts, "train": BlockView(train, order=order)}, extra=extra),
        plan.output,
        params=params,
        stats=stats,
    )

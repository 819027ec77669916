"""Step 8, ``shard``: this rank's part of every global batch of the global train order.

The train order of an epoch is defined over the *whole* train split (a permutation that is a
function of the seed and the epoch, :mod:`lightning_order.positions`), cut into global batches of
``world_size × batch_size`` rows; rank ``r`` reads rows ``[r·B, (r+1)·B)`` of each. Every rank
therefore reads the same number of rows (what does not fill a global batch is dropped each epoch,
recorded), so DDP never waits on a rank that ran out of batches, and the order is the same
whatever the number of ranks: a run resumed on another number of ranks with the same global batch
continues at the same row.

The step keeps the whole split for the loader (which reads each epoch's part by index from the
memory-mapped Arrow file) and leaves, as the rank's ``train`` part, the rows it reads in the first
epoch: what a per-rank step after it (a wrong order, e.g. statistics fitted per shard) learns
from, and what ``key_hashes("train")`` shows.
"""

from __future__ import annotations

from dataclasses import replace

from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.engine.sharding import plan_shard
from lightning_order.data.text.registry import STEPS

__all__ = ["shard"]


@STEPS.register(
    "shard",
    takes=frozenset({"encoded"}),
    makes="shard",
    consumes=("encode",),
    reads="none",
    writes_data=True,
    per_rank=True,
    config=("batch_size", "seed", "shuffle"),
)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """Step 8 (in ``setup``, on every rank): this rank's part of every global batch of the train split."""
    train = state.parts["train"]
    plan = plan_shard(ctx, len(train), ctx.inputs["encode"])
    first_epoch = train.select(plan.order.rank_indices(0))
    extra = {**state.extra, "served": train, "global_order": plan.order}
    return StepResult(
        replace(state, parts={**state.parts, "train": first_epoch}, extra=extra),
        plan.output,
        params=plan.params,
        stats=plan.stats,
    )

"""Step 8, ``shard``: one equal-length, contiguous shard of the train split per rank.

Every rank gets exactly ``len(train) // world_size`` rows, rank ``r`` the rows
``[r * n, (r + 1) * n)``; the last ``len(train) % world_size`` rows are dropped (the same rows on
every run, recorded in the ledger). Equal lengths mean equal batch counts, so DDP never waits on a
rank that ran out of batches. Contiguous shards keep reads sequential on memory-mapped Arrow
files; a contiguous shard also shows any drift along the file (e.g. data from several sources),
which is exactly what per-rank statistics would get wrong.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.text.registry import STEPS
from lightning_order.ledger import fingerprint

__all__ = ["shard", "shard_bounds", "shard_dataset"]


def shard_bounds(length: int, world_size: int, rank: int) -> tuple[int, int, int]:
    """The ``(start, stop, dropped)`` of ``rank``'s shard.

    Raises:
        ValueError: ``rank`` is outside ``[0, world_size)`` or a rank would get no row.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got rank={rank}, world_size={world_size}")
    per_rank = length // world_size
    if per_rank == 0:
        raise ValueError(
            f"the train split has {length} rows, fewer than the {world_size} ranks: every rank needs "
            "at least one row; use more data or fewer devices"
        )
    return rank * per_rank, (rank + 1) * per_rank, length - per_rank * world_size


def shard_dataset(dataset: Any, world_size: int, rank: int) -> tuple[Any, dict[str, int]]:
    """``rank``'s shard of ``dataset`` and its info (``rank``, ``world_size``, ``start``, ``length``, ``dropped``)."""
    start, stop, dropped = shard_bounds(len(dataset), world_size, rank)
    shard = dataset.select(range(start, stop))
    info = {
        "rank": rank,
        "world_size": world_size,
        "start": start,
        "length": stop - start,
        "dropped": dropped,
    }
    return shard, info


@STEPS.register(
    "shard",
    takes=frozenset({"encoded"}),
    makes="shard",
    needs=("encode",),
    consumes=("encode",),
    reads="none",
    writes_data=True,
    per_rank=True,
)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """Step 8 (in ``setup``, on every rank): this rank's shard of the encoded train split."""
    part, info = shard_dataset(state.parts["train"], ctx.world_size, ctx.rank)
    return StepResult(
        replace(state, parts={**state.parts, "train": part}),
        fingerprint("shard", ctx.inputs["encode"], ctx.rank, ctx.world_size),
        params={"layout": "contiguous"},
        stats={k: info[k] for k in ("length", "world_size", "dropped", "start")},
    )

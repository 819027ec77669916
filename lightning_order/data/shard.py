"""Step 8, ``shard``: one equal-length, contiguous shard of the train split per rank.

Every rank gets exactly ``len(train) // world_size`` rows, rank ``r`` the rows
``[r * n, (r + 1) * n)``; the last ``len(train) % world_size`` rows are dropped (the same rows on
every run, recorded in the ledger). Equal lengths mean equal batch counts, so DDP never waits on a
rank that ran out of batches. Contiguous shards keep reads sequential on memory-mapped Arrow
files; a contiguous shard also shows any drift along the file (e.g. data from several sources),
which is exactly what per-rank statistics would get wrong.
"""

from __future__ import annotations

from typing import Any

__all__ = ["shard_bounds", "shard_dataset"]


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

"""The dataloaders: one seeded sampler per rank over data that is already this rank's part.

The prepared splits are already sharded per rank, so every loader uses a one-replica
:class:`~torch.utils.data.DistributedSampler` (seeded shuffling that Lightning sets the epoch of,
and that Lightning leaves alone instead of sharding the shard again).
Each pipeline brings its own collate function (:mod:`lightning_order.data.text.batches`,
:mod:`lightning_order.data.lm.datamodule`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, Dataset, DistributedSampler

__all__ = ["make_loader"]


def make_loader(
    data: Dataset | None,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_workers: int,
    collate: Callable[[Any], Any],
) -> DataLoader:
    """A loader over ``data`` (already this rank's part) with a seeded one-replica sampler.

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    if data is None:
        raise RuntimeError("call setup() before asking for a dataloader (Lightning does it for you)")
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
    return DataLoader(
        data,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        persistent_workers=num_workers > 0,
    )

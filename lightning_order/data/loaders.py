"""The dataloaders' side of the batch contract: stacking rows into batches, one sampler per rank.

The prepared splits are already sharded per rank, so every loader uses a one-replica
:class:`~torch.utils.data.DistributedSampler` (seeded shuffling that Lightning sets the epoch of,
and that Lightning leaves alone instead of sharding the shard again). Statistics fitted after
``encode`` (per shard, in a deliberately wrong order) are applied here, when batching.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torch.utils.data._utils.collate import default_collate

__all__ = ["BATCH_KEYS", "Collate", "make_loader"]

#: The keys of every batch, in order (docs/architecture.md, "batch contract").
BATCH_KEYS: tuple[str, ...] = ("input_ids", "attention_mask", "features", "labels")


class Collate:
    """Stacks torch-formatted rows into the batch contract; standardises features when given statistics."""

    def __init__(self, mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> None:
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32)

    def __call__(self, rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = default_collate(rows)
        out = {
            "input_ids": batch["input_ids"].long(),
            "attention_mask": batch["attention_mask"].long(),
            "features": batch["features"].float(),
            "labels": batch["labels"].long(),
        }
        if self.mean is not None and self.std is not None:
            out["features"] = (out["features"] - self.mean) / self.std
        return out


def make_loader(
    data: Dataset | None, batch_size: int, shuffle: bool, seed: int, num_workers: int, collate: Collate
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

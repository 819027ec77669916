"""The text-classification batch contract: rows stacked into ``input_ids``, ``attention_mask``, ``features``, ``labels``.

Statistics fitted after ``encode`` (per shard, in a deliberately wrong order) are applied here,
when batching.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data._utils.collate import default_collate

__all__ = ["BATCH_KEYS", "Collate"]

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

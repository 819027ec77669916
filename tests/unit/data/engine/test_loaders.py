"""``lightning_order.data.engine.loaders``: the batch contract's collation and the per-rank loader."""

from __future__ import annotations

import pytest
import torch

from lightning_order.data.engine.loaders import make_loader
from lightning_order.data.text.batches import BATCH_KEYS, Collate


def _rows(n):
    return [
        {
            "input_ids": torch.tensor([i, 0], dtype=torch.int32),
            "attention_mask": torch.tensor([1, 0], dtype=torch.int8),
            "features": torch.tensor([float(i)]),
            "labels": torch.tensor(i % 2),
        }
        for i in range(n)
    ]


def test_collate_widens_types_and_standardises_when_given_statistics():
    batch = Collate()(_rows(3))
    assert tuple(batch) == BATCH_KEYS
    assert batch["input_ids"].dtype == batch["attention_mask"].dtype == batch["labels"].dtype == torch.long
    assert Collate([1.0], [2.0])(_rows(3))["features"][:, 0].tolist() == [-0.5, 0.0, 0.5]


def test_loader_needs_setup_and_is_seeded():
    with pytest.raises(RuntimeError, match="setup"):
        make_loader(None, 2, True, 0, 0, Collate())
    first = [b["labels"].tolist() for b in make_loader(_rows(8), 2, True, 7, 0, Collate())]
    again = [b["labels"].tolist() for b in make_loader(_rows(8), 2, True, 7, 0, Collate())]
    assert first == again and len(first) == 4

"""``lightning_order.callbacks.labels``: the ranks' label columns joined, and data that cannot hold an
encoding left after a bounded probe."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from lightning_order.callbacks.labels import join_rank_parts


def test_shards_are_joined_and_a_whole_split_is_kept_once() -> None:
    x, y = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6)

    def part(rows, digest):
        return {
            "x": x[rows],
            "y": y[rows],
            "names": ["a", "b"],
            "sampled": False,
            "digest": digest,
        }

    joined = join_rank_parts([part(slice(0, 3), "r0"), part(slice(3, 6), "r1")])
    assert np.array_equal(joined["x"], x) and np.array_equal(joined["y"], y)
    whole = join_rank_parts([part(slice(0, 6), "same"), part(slice(0, 6), "same")])
    assert len(whole["y"]) == 6  # a DistributedSampler pipeline: every rank holds the whole split
    assert join_rank_parts([part(slice(0, 3), "r0"), None]) is None


def test_data_that_cannot_hold_an_encoding_is_left_after_a_probe() -> None:
    from lightning_order.callbacks.labels import split_columns

    class Counting(torch.utils.data.Dataset):
        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y, self.reads = x, y, 0

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int):
            self.reads += 1
            return self.x[i], self.y[i]

    class Data:
        def __init__(self, dataset) -> None:
            self.dataset = dataset

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.dataset, batch_size=8)

    g = torch.Generator().manual_seed(0)
    continuous = Counting(torch.randn(5000, 3, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert split_columns(Data(continuous), "train", 100_000) is None and continuous.reads == 256
    images = Counting(torch.randn(5000, 3, 16, 16, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert split_columns(Data(images), "train", 100_000) is None and images.reads == 256
    encoded = Counting(
        torch.randint(0, 9, (5000, 1), generator=g).float(), torch.randint(0, 2, (5000,), generator=g)
    )
    read = split_columns(Data(encoded), "train", 100_000)
    assert read["x"].shape == (5000, 1) and encoded.reads == 5000

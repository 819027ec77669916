"""``lightning_order.callbacks.validator.labels``: the ranks' label columns joined, and data that cannot hold an
encoding left after a bounded probe."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from lightning_order.callbacks.validator.content import join_rank_parts


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
    from lightning_order.callbacks.validator.content import read_split_columns

    reads: list[int] = []  # outside the dataset: the validator puts a dataset's own counters back

    class Counting(torch.utils.data.Dataset):
        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y = x, y
            reads.clear()

        @property
        def reads(self) -> int:
            return len(reads)

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int):
            reads.append(i)
            return self.x[i], self.y[i]

    class Data:
        def __init__(self, dataset) -> None:
            self.dataset = dataset

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.dataset, batch_size=8)

    g = torch.Generator().manual_seed(0)
    continuous = Counting(torch.randn(5000, 3, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert read_split_columns(Data(continuous), "train", 100_000)[1] is None and continuous.reads == 256
    images = Counting(torch.randn(5000, 3, 16, 16, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert read_split_columns(Data(images), "train", 100_000)[1] is None and images.reads == 256
    encoded = Counting(
        torch.randint(0, 9, (5000, 1), generator=g).float(), torch.randint(0, 2, (5000,), generator=g)
    )
    read = read_split_columns(Data(encoded), "train", 100_000)[1]
    assert read["x"].shape == (5000, 1) and encoded.reads == 5000


def test_the_verdict_says_whether_the_check_could_judge() -> None:
    from types import SimpleNamespace

    from lightning_order.callbacks.validator.content import label_encoding_verdict, read_split_columns

    class Data:
        def __init__(self, train, val) -> None:
            self.train, self.val = train, val

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train, batch_size=64)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val, batch_size=64)

    g = torch.Generator().manual_seed(0)
    trainer = SimpleNamespace(world_size=1)

    def rows(n: int, x: torch.Tensor, labelled: bool = True):
        y = torch.randint(0, 2, (n,), generator=g)
        return torch.utils.data.TensorDataset(x, y) if labelled else torch.utils.data.TensorDataset(x)

    continuous = Data(
        rows(600, torch.randn(600, 3, generator=g)), rows(200, torch.randn(200, 3, generator=g))
    )
    assert read_split_columns(continuous, "train", 1000)[0] == "no-candidate"
    assert label_encoding_verdict(trainer, continuous, 1000) == (True, [])  # nothing could be an encoding
    unlabelled = Data(rows(600, torch.randn(600, 3), False), rows(200, torch.randn(200, 3), False))
    assert read_split_columns(unlabelled, "train", 1000)[0] == "unreadable"
    assert label_encoding_verdict(trainer, unlabelled, 1000) == (False, [])  # no verdict
    # A column of 9 values that has nothing to do with the label: read, judged, clean.
    categories = Data(
        rows(600, torch.randint(0, 9, (600, 1), generator=g).float()),
        rows(200, torch.randint(0, 9, (200, 1), generator=g).float()),
    )
    assert read_split_columns(categories, "train", 1000)[0] == "read"
    assert label_encoding_verdict(trainer, categories, 1000) == (True, [])

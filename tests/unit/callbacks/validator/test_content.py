"""lightning_order/callbacks/validator/content.py: what the splits and the ranks hold, by content.

Reading the real train loader with its workers, on a copy.

The ranks' label columns joined, and data that cannot hold an
encoding left after a bounded probe.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from streams import Rows, ShardStream, TokenStream, documents
from torch.utils.data import DataLoader

from lightning_order.callbacks.validator.content import join_rank_parts, read_served, rows_served_twice


def _trainer(loader: DataLoader) -> SimpleNamespace:
    return SimpleNamespace(train_dataloader=loader, world_size=1)


def test_two_workers_that_each_read_every_shard_are_proven():
    loader = DataLoader(ShardStream(split_workers=False), batch_size=4, num_workers=2)
    proven, suspected = rows_served_twice(_trainer(loader))
    assert [v.rule for v in proven] == ["rows-served-twice"] and suspected == []
    details = proven[0].details
    assert details["workers"] == 2 and details["cross_worker"] >= details["rows"] // 2 - 4
    assert details["own_repeats"] == 0  # read without workers, the stream holds no repeats


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_a_stream_split_by_get_worker_info_is_silent(workers):
    loader = DataLoader(ShardStream(), batch_size=4, num_workers=workers)
    assert rows_served_twice(_trainer(loader)) == ([], [])


def test_real_duplicate_rows_read_with_workers_are_no_false_alarm():
    loader = DataLoader(ShardStream(repeat=2), batch_size=4, num_workers=2)
    assert rows_served_twice(_trainer(loader)) == ([], [])


def test_map_style_with_workers_and_a_stateful_stream_are_silent():
    assert rows_served_twice(_trainer(DataLoader(Rows(), batch_size=8, shuffle=True, num_workers=2))) == (
        [],
        [],
    )
    assert rows_served_twice(_trainer(DataLoader(TokenStream(documents()), batch_size=4))) == ([], [])


def test_the_copy_moves_neither_the_stream_nor_the_random_state():
    stream = TokenStream(documents())
    loader = DataLoader(stream, batch_size=4, num_workers=2, generator=torch.Generator().manual_seed(3))
    before, generator = stream.state_dict(), loader.generator.get_state()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    served = read_served(loader, rows=16)
    assert {w for w, _ in served} == {0, 1}  # both workers were read
    assert torch.equal(torch.rand(3), expected)
    assert stream.state_dict() == before and torch.equal(loader.generator.get_state(), generator)


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

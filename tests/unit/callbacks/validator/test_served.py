"""Reading the real train loader with its workers, on a copy (lightning_order/callbacks/validator/served.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from streams import Rows, ShardStream, TokenStream, documents
from torch.utils.data import DataLoader

from lightning_order.callbacks.validator.content import read_served, rows_served_twice


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

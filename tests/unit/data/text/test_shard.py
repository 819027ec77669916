"""``lightning_order.data.text.shard``: equal, contiguous shards."""

from __future__ import annotations

import itertools

import pytest

from lightning_order.data.text.shard import shard_bounds


@pytest.mark.parametrize(("length", "world"), [(10, 1), (10, 2), (10, 3), (7, 7), (1001, 4)])
def test_shard_bounds_equal_disjoint(length, world):
    bounds = [shard_bounds(length, world, r) for r in range(world)]
    sizes = {stop - start for start, stop, _ in bounds}
    assert len(sizes) == 1
    covered = list(itertools.chain.from_iterable(range(a, b) for a, b, _ in bounds))
    assert covered == list(range(len(covered)))
    assert bounds[0][2] == length - len(covered) == length % world


@pytest.mark.parametrize(("length", "world", "rank"), [(1, 2, 0), (10, 2, 2), (10, 0, 0)])
def test_shard_bounds_errors(length, world, rank):
    with pytest.raises(ValueError):
        shard_bounds(length, world, rank)

"""``lightning_order.permutation``: a seeded bijection of ``range(size)`` computed per index."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.permutation import permutation_key, permute


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 1000, 4097])
def test_the_permutation_holds_every_value_once(size: int) -> None:
    for key in (permutation_key(0, 0), permutation_key(7, 3)):
        values = permute(np.arange(size), size, key)
        assert values.dtype == np.int64 and sorted(values.tolist()) == list(range(size))


def test_a_value_depends_on_its_position_and_key_only() -> None:
    size, key = 10_000, permutation_key(3, 1)
    whole = permute(np.arange(size), size, key)
    at = np.array([9_999, 0, 17, 17, 5_000])
    assert np.array_equal(permute(at, size, key), whole[at])
    assert np.array_equal(permute(at.reshape(5, 1), size, key), whole[at].reshape(5, 1))
    assert not np.array_equal(whole, permute(np.arange(size), size, permutation_key(3, 2)))
    assert not np.array_equal(whole, np.arange(size))


def test_positions_of_a_huge_range_cost_only_the_positions() -> None:
    size = 10**15  # a table of it would be 8 PB
    values = permute(np.array([0, 1, size - 1, 123_456_789]), size, permutation_key(1, 0))
    assert len(set(values.tolist())) == 4 and all(0 <= v < size for v in values.tolist())


def test_a_position_outside_the_range_is_refused() -> None:
    with pytest.raises(IndexError, match=r"outside \[0, 10\)"):
        permute(np.array([10]), 10, 1)
    with pytest.raises(IndexError):
        permute(np.array([-1]), 10, 1)

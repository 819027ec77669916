"""Evaluation shares: each data-parallel rank a contiguous share, every sample once, sizes within one."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler

from lightning_order.data.engine.eval_shares import ShareSampler, eval_share, make_share_loader, padded_share


@pytest.mark.parametrize(("size", "parts"), [(10, 1), (10, 2), (11, 2), (11, 3), (100, 7), (5, 5)])
def test_shares_are_disjoint_cover_the_split_once_and_differ_by_at_most_one(size: int, parts: int) -> None:
    shares = [list(eval_share(size, parts, part)) for part in range(parts)]
    assert [i for share in shares for i in share] == list(
        range(size)
    )  # in order, each index once: no padding repeats
    lengths = [len(share) for share in shares]
    assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1


def test_a_split_smaller_than_the_ranks_is_read_whole_by_every_rank() -> None:
    """Every sample counted as often keeps a sum-and-count mean exact, and no rank is left without a batch."""
    assert [eval_share(3, 4, part) for part in range(4)] == [range(3)] * 4


@pytest.mark.parametrize(("parts", "part"), [(0, 0), (2, 2), (2, -1)])
def test_an_impossible_rank_is_refused(parts: int, part: int) -> None:
    with pytest.raises(ValueError, match="expected 0 <= part < parts"):
        eval_share(10, parts, part)


def test_the_loader_reads_its_share_with_a_sampler_lightning_leaves_alone() -> None:
    data = list(range(11))
    loaders = [make_share_loader(data, 4, 0, list, 2, part) for part in range(2)]
    assert all(
        isinstance(loader.sampler, ShareSampler) and isinstance(loader.sampler, DistributedSampler)
        for loader in loaders
    )
    read = [[item for batch in loader for item in batch] for loader in loaders]
    assert read == [list(range(5)), list(range(5, 11))]
    assert [len(loader.sampler) for loader in loaders] == [5, 6]
    with pytest.raises(RuntimeError, match="call setup"):
        make_share_loader(None, 4, 0, list, 2, 0)


@pytest.mark.parametrize(("size", "parts"), [(10, 2), (11, 2), (11, 3), (100, 7), (3, 4)])
def test_padded_shares_are_as_long_and_pad_with_the_index_past_the_end(size: int, parts: int) -> None:
    """Every rank runs as many steps (a sharded model's forward is a collective); the padding is no sample."""
    shares = [padded_share(size, parts, part) for part in range(parts)]
    assert len({len(share) for share in shares}) == 1
    real = [i for share in shares for i in share if i != size]
    assert real == list(range(size)) * (1 if size >= parts else parts)
    assert sum(share.count(size) for share in shares) == len(shares[0]) * parts - len(real)
    assert [list(ShareSampler(list(range(size)), parts, part, pad=True)) for part in range(parts)] == shares

"""A mixture's draw computed per slot (issue #35 item 4; data/lm/mixture_draw.py).

The interleave is a bijection of the slots onto each source's draws and keeps every prefix near
the weights (exactly, also past int64 products); each source is drawn exactly its count, each of
its blocks the floor or the ceiling of count / size times an epoch, and a downsampled source
serves every block in each cycle of ceil(size / count) epochs; a batch of slots reads what the whole draw reads.
"""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.data.lm.mixture_draw import drawn_rows, interleave, source_blocks


@pytest.mark.parametrize("counts", [(50, 50), (30, 12, 18), (0, 7, 0, 93), (1, 999), (5,)])
def test_the_interleave_is_a_bijection_onto_each_sources_draws(counts: tuple[int, ...]) -> None:
    source, rank = interleave(np.arange(sum(counts)), counts)
    for i, count in enumerate(counts):
        assert np.array_equal(np.sort(rank[source == i]), np.arange(count))  # every draw once
    assert (source >= 0).all()


@pytest.mark.parametrize("counts", [(50, 50), (30, 12, 18), (700, 300), (3, 1000, 17, 480)])
def test_every_prefix_of_the_slots_holds_each_source_within_a_few_slots_of_its_weight(
    counts: tuple[int, ...],
) -> None:
    source, _ = interleave(np.arange(sum(counts)), counts)
    prefix = np.arange(1, sum(counts) + 1)
    for i, count in enumerate(counts):
        held = np.cumsum(source == i)
        assert np.abs(held - prefix * count / sum(counts)).max() <= len(counts)


def _reference(slot: int, counts: tuple[int, ...]) -> tuple[int, int]:
    """The interleave in Python integers (no overflow): Bresenham's line per source, the rest renumbered."""
    remaining = sum(counts)
    for i, count in enumerate(counts):
        before, upto = slot * count // remaining, (slot + 1) * count // remaining
        if upto > before:
            return i, before
        slot, remaining = slot - before, remaining - count
    raise AssertionError("no source")


def test_the_interleave_is_exact_past_int64_products() -> None:
    counts = (2**32 + 5, 3 * 2**31 + 7, 12_345)  # products of slots and counts overflow int64
    total = sum(counts)
    slots = np.array([0, 1, 2, 12_345, 2**32, total // 2, total - 2, total - 1], dtype=np.int64)
    source, rank = interleave(slots, counts)
    assert [(int(s), int(r)) for s, r in zip(source, rank)] == [_reference(int(q), counts) for q in slots]
    head_source, head_rank = interleave(np.arange(10_000), counts)
    for i in range(3):  # the first slots of each source hold its first draws, in order
        assert np.array_equal(head_rank[head_source == i], np.arange((head_source == i).sum()))


def test_a_slot_outside_the_draw_is_an_index_error() -> None:
    with pytest.raises(IndexError, match=r"outside \[0, 10\)"):
        interleave(np.array([10]), (4, 6))


@pytest.mark.parametrize(
    ("size", "count"), [(10, 50), (10, 57), (7, 3), (90, 50), (13, 13), (5, 1), (1, 9), (1000, 2499)]
)
def test_each_block_is_drawn_the_floor_or_the_ceiling_of_count_over_size_times_an_epoch(
    size: int, count: int
) -> None:
    for epoch in range(6):
        drawn = source_blocks(np.arange(count), size, count, seed=4, source=1, epoch=epoch)
        assert len(drawn) == count and drawn.min() >= 0 and drawn.max() < size
        times = np.bincount(drawn, minlength=size)
        assert times.min() == count // size and times.max() == -(-count // size)


@pytest.mark.parametrize(("size", "count"), [(90, 50), (10, 3), (100, 7), (10, 23)])
def test_the_extra_draws_move_on_each_epoch_so_every_block_is_served_within_a_cycle(
    size: int, count: int
) -> None:
    extra = count % size
    cycle = -(-size // extra)  # ceil(size / extra) epochs
    for first in (0, cycle, 2 * cycle):  # each cycle's epochs: windows of one permutation, covering it
        seen = np.concatenate(
            [source_blocks(np.arange(count), size, count, 0, 0, e) for e in range(first, first + cycle)]
        )
        assert set(seen.tolist()) == set(range(size))
    one, two = (source_blocks(np.arange(count), size, count, 0, 0, e) for e in (0, 1))
    if count < size and 2 * count <= size:  # where the last epoch stopped: no block twice in a row
        assert not set(one.tolist()) & set(two.tolist())


def test_the_draw_is_a_function_of_the_seed_the_source_and_the_epoch() -> None:
    draw = source_blocks(np.arange(50), 90, 50, seed=1, source=0, epoch=2)
    assert np.array_equal(draw, source_blocks(np.arange(50), 90, 50, seed=1, source=0, epoch=2))
    for other in ({"seed": 2, "source": 0, "epoch": 2}, {"seed": 1, "source": 1, "epoch": 2}):
        assert not np.array_equal(draw, source_blocks(np.arange(50), 90, 50, **other))
    upsampled = [source_blocks(np.arange(30), 10, 30, 1, 0, e) for e in (0, 1)]
    assert not np.array_equal(*upsampled)  # whole passes: another permutation each epoch


def test_draws_from_a_source_with_no_block_are_refused() -> None:
    with pytest.raises(ValueError, match="source 2 has no block to draw 5 from"):
        source_blocks(np.arange(5), 0, 5, seed=0, source=2, epoch=0)


def test_batches_of_slots_read_what_the_whole_draw_reads() -> None:
    blocks, counts = (7, 40, 13), (30, 12, 18)
    whole = drawn_rows(np.arange(60), blocks, counts, seed=5, epoch=3)
    slots = np.random.default_rng(0).permutation(60)
    parts = [drawn_rows(part, blocks, counts, seed=5, epoch=3) for part in np.array_split(slots, 7)]
    assert np.array_equal(np.concatenate(parts), whole[slots])
    starts = np.cumsum((0, *blocks))
    owner = np.searchsorted(starts, whole, side="right") - 1
    assert np.bincount(owner, minlength=3).tolist() == list(counts)  # each source drawn its count

"""``lightning_order.positions``: the global train order and the position in it (docs/architecture.md, "The train order and the position")."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order import DataError
from lightning_order.errors import CheckpointError
from lightning_order.positions import (
    GlobalOrder,
    TrainPosition,
    check_position,
    epoch_order,
    remaining_positions,
)


def test_the_order_of_an_epoch_is_a_function_of_the_seed_and_the_epoch() -> None:
    first = epoch_order(100, seed=3, epoch=0)
    assert np.array_equal(first, epoch_order(100, seed=3, epoch=0))
    assert sorted(first.tolist()) == list(range(100))
    assert not np.array_equal(first, epoch_order(100, seed=3, epoch=1))
    assert not np.array_equal(first, epoch_order(100, seed=4, epoch=0))
    assert epoch_order(5, seed=3, epoch=7, shuffle=False).tolist() == [0, 1, 2, 3, 4]
    assert len(epoch_order(10, seed=-1, epoch=0)) == 10  # any int seeds it


@pytest.mark.parametrize(("size", "batch", "world"), [(100, 4, 1), (100, 4, 2), (101, 3, 3), (64, 8, 4)])
def test_ranks_read_equal_disjoint_parts_of_every_global_batch(size: int, batch: int, world: int) -> None:
    ranks = [GlobalOrder(size, batch, world, rank, seed=1) for rank in range(world)]
    parts = [order.rank_indices(epoch=2).reshape(-1, batch) for order in ranks]
    global_batch = batch * world
    assert {len(p) for p in parts} == {size // global_batch}
    assert ranks[0].length == size // global_batch * batch and ranks[0].dropped == size % global_batch
    # Side by side in rank order, the ranks' batches are the epoch's global batches.
    together = np.concatenate(parts, axis=1)
    alone = GlobalOrder(size, global_batch, 1, 0, seed=1).rank_indices(epoch=2).reshape(-1, global_batch)
    assert np.array_equal(together, alone)
    assert len(np.unique(together)) == together.size


def test_a_position_continues_the_same_order_whatever_the_global_batch() -> None:
    order = GlobalOrder(50, 5, 2, 0, seed=0)  # global batch 10
    whole = epoch_order(50, 0, 0)
    assert np.array_equal(order.rank_indices(0, start=20), whole[20:50].reshape(-1, 10)[:, :5].ravel())
    assert remaining_positions(50, 10, 20) == 30 and remaining_positions(50, 8, 20) == 24
    other = GlobalOrder(50, 4, 2, 1, seed=0)  # global batch 8, from sample 20: rank 1 reads [24, 28), ...
    assert np.array_equal(
        other.rank_indices(0, start=20), whole[[24, 25, 26, 27, 32, 33, 34, 35, 40, 41, 42, 43]]
    )


def test_a_split_that_cannot_fill_one_global_batch_is_refused() -> None:
    with pytest.raises(
        DataError, match=r"fewer than one global batch of 8 \(2 ranks × batch_size 4\)"
    ) as err:
        GlobalOrder(7, 4, 2, 0).require_one_batch("rows")
    assert err.value.step == "shard" and "lower batch_size" in str(err.value)
    GlobalOrder(8, 4, 2, 1).require_one_batch("rows")
    with pytest.raises(ValueError, match="rank must be"):
        GlobalOrder(8, 4, 2, 2)


def test_a_position_round_trips_as_plain_data_and_knows_the_next_sample() -> None:
    order = GlobalOrder(50, 5, 2, 1, seed=9, shuffle=True)
    position = TrainPosition.of(order, epoch=3, samples=20, digest=order.digest(3))
    data = position.to_dict()
    assert data["format"] == "lightning_order.position" and data["global_batch"] == 10
    assert all(isinstance(v, (int, str, bool)) for v in data.values())  # loads with weights_only=True
    assert TrainPosition.from_dict(data) == position
    assert TrainPosition.from_dict({"epoch": 1}) is None and TrainPosition.from_dict({}) is None
    assert TrainPosition.from_dict({"format": "lightning_order.position", "epoch": 1}) is None
    assert position.next_sample() == (3, 20)
    assert TrainPosition.of(order, 3, 50).next_sample() == (4, 0)  # the epoch is done
    assert order.digest(3) == GlobalOrder(50, 25, 2, 0, seed=9).digest(3) != order.digest(4)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("epoch", -1, "a whole number >= 0 (the epoch the run stood in)"),
        ("samples", "20", "a whole number >= 0 (global samples of the epoch consumed)"),
        ("samples", None, "a whole number >= 0"),
        ("samples", -10, "a whole number >= 0"),
        ("epoch", True, "a whole number >= 0"),
        ("global_batch", 0, "a whole number >= 1 (samples per step over all ranks)"),
        ("seed", "9", "a whole number (the shuffle's seed)"),
        ("shuffle", "yes", "true or false"),
    ],
)
def test_a_position_no_run_could_have_saved_is_one_checkpoint_error_naming_the_field(
    field: str, value: object, expected: str
) -> None:
    order = GlobalOrder(50, 5, 2, 1, seed=9)
    data = {**TrainPosition.of(order, 3, 20).to_dict(), field: value}
    with pytest.raises(CheckpointError) as caught:
        TrainPosition.from_dict(data)
    message = str(caught.value)
    assert f"the checkpoint's data position has {field}={value!r}, expected {expected}" in message
    assert "Resume from an intact checkpoint of this run" in message
    with pytest.raises(CheckpointError, match="not a mapping"):
        check_position(["epoch", 3])
    check_position({"epoch": 0, "batches": 4, "samples": None, "global_batch": None})  # a plain loader's


@pytest.mark.parametrize(("start", "batches"), [(0, None), (20, None), (10, 2), (0, 0)])
def test_a_ranks_indices_made_a_chunk_at_a_time_are_its_indices(
    monkeypatch: pytest.MonkeyPatch, start: int, batches: int | None
) -> None:
    from lightning_order import positions

    monkeypatch.setattr(positions, "_CHUNK_POSITIONS", 6)  # several chunks of 2 global batches
    order = GlobalOrder(101, 3, 2, 1, seed=5)
    whole = order.rank_indices(4, start)
    chunks = list(order.rank_chunks(4, start, batches))
    joined = np.concatenate([np.empty(0, np.int64), *chunks])
    expected = whole if batches is None else whole[: batches * 3]
    assert np.array_equal(joined, expected) and all(len(c) <= 6 for c in chunks)


def test_the_order_of_a_huge_split_is_read_without_a_permutation_of_it() -> None:
    """10^12 blocks: a materialised order would be 8 TB per rank; the position's memory is the batch's."""
    order = GlobalOrder(10**12, 4, 8, 3, seed=1)
    first = next(order.rank_chunks(epoch=2, start=64))
    assert (
        first.dtype == np.int64
        and len(first) > 0
        and len(set(first[:1000].tolist())) == min(1000, len(first))
    )
    assert np.array_equal(first[:4], order.order_at(2, np.arange(64 + 12, 64 + 16)))
    assert order.digest(2) == GlobalOrder(10**12, 32, 1, 0, seed=1).digest(2) != order.digest(3)


def test_the_order_is_the_same_on_every_rank_count_and_a_function_of_seed_and_epoch() -> None:
    """The same global order cut for 1, 2 and 4 ranks; a new seed or epoch gives another (the #35 order:
    a Feistel bijection, not numpy's PCG64 permutation of earlier versions)."""
    alone = GlobalOrder(96, 8, 1, 0, seed=2).rank_indices(1).reshape(-1, 8)
    for world in (2, 4):
        parts = [GlobalOrder(96, 8 // world, world, r, seed=2).rank_indices(1) for r in range(world)]
        assert np.array_equal(np.concatenate([p.reshape(-1, 8 // world) for p in parts], axis=1), alone)
    legacy = np.random.Generator(np.random.PCG64([2, 1])).permutation(96)
    assert not np.array_equal(epoch_order(96, 2, 1), legacy)
    assert np.array_equal(epoch_order(96, 2, 1), epoch_order(96, 2, 1))

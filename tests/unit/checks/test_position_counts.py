"""A checkpoint's own data position judged by its arithmetic and Lightning's loop count (``resume-position``, issue #42).

Through a real checkpoint edited alike in every copy: tests/integration/test_resume.py.
"""

from __future__ import annotations

import pytest

from lightning_order.checks.position_counts import check_stored_position, stored_loop_count
from lightning_order.positions import GlobalOrder, TrainPosition


def _ours(epoch: int, samples: int, batch: int = 10, size: int = 100) -> dict:
    """A position of our loader (global batch ``batch`` on one rank), with Lightning's counts."""
    rule = GlobalOrder(size, batch, 1, 0)
    facts = {"batches": samples // batch, "epoch_batches": size // batch}
    return {**facts, **TrainPosition.of(rule, epoch, samples, rule.digest(epoch)).to_dict()}


def _plain(epoch: int, batches: int) -> dict:
    """A plain loader's position: Lightning's batch count times the global batch."""
    return {"epoch": epoch, "batches": batches, "epoch_batches": 10, "global_batch": 10, "samples": batches * 10}


@pytest.mark.parametrize(
    ("samples", "says"),
    [
        (10**9, "samples=1000000000 lies beyond the 100 samples the epoch serves"),
        (33, "samples=33 is not a whole number of global batches of 10"),
        (60, "samples=60 (6 batches of 10) disagrees with Lightning's own loop in the same checkpoint, "
         "which counts 2 batches of epoch 0 done"),
    ],
    ids=["beyond-the-epoch", "mid-batch", "not-lightnings-count"],
)
def test_an_impossible_stored_position_is_resume_position(samples: int, says: str) -> None:
    stored = {**_ours(0, 20), "samples": samples}  # every copy edited alike: only `samples` moved
    (violation,) = check_stored_position(stored, {"epoch": 0, "batches": 2})
    assert violation.rule == "resume-position" and violation.steps == ("train",)
    assert says in violation.message and "edited or damaged" in violation.message
    assert "resume from an intact checkpoint" in violation.fix


@pytest.mark.parametrize(
    ("stored", "loop"),
    [
        (_ours(0, 20), {"epoch": 0, "batches": 2}),  # where the run stood
        (_ours(0, 100), {"epoch": 0, "batches": 10}),  # the epoch's end
        (_ours(1, 0), {"epoch": 1, "batches": 0}),  # the next epoch's head
        (_ours(0, 20), None),  # no loop state to compare with
        (_ours(1, 30), {"epoch": 0, "batches": 10}),  # Lightning's count of another epoch: not comparable
        (_plain(0, 4), {"epoch": 0, "batches": 4}),  # a plain loader's position is Lightning's count
        ({"epoch": 0, "samples": None, "global_batch": None}, {"epoch": 0, "batches": 3}),  # unknown
        (None, {"epoch": 0, "batches": 3}),
    ],
)
def test_a_possible_stored_position_passes(stored, loop) -> None:
    assert check_stored_position(stored, loop) == []


def test_lightnings_count_is_read_from_the_fit_loop_of_the_checkpoint() -> None:
    progress = {"current": {"ready": 2, "completed": 1, "started": 2, "processed": 2}}
    loops = {"fit_loop": {"epoch_progress": {"current": {"started": 3}}, "epoch_loop.batch_progress": progress}}
    assert stored_loop_count({"loops": loops}) == {"epoch": 2, "batches": 2}
    assert stored_loop_count({}) is None and stored_loop_count({"loops": {"fit_loop": {}}}) is None

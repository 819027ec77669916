"""``ranks-read-same-data`` on plain per-rank summaries (lightning_order/checks/rank_data.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.rank_data import check_rank_reads, read_shares
from lightning_order.rules import RULES


def _reads(indices: np.ndarray, space: int = 100, dataset: str = "d") -> dict:
    read = np.zeros(space, dtype=bool)
    read[indices] = True
    return {"dataset": dataset, "space": space, "bitmap": np.packbits(read).tobytes()}


def _summary(rank: int, indices=None, first=None, dp_rank=None, dataset: str = "d") -> dict:
    summary: dict = {"rank": rank}
    if dp_rank is not None:
        summary["data_parallel"] = {"rank": dp_rank, "size": 1}
    if indices is not None:
        summary["reads"] = _reads(np.asarray(indices), dataset=dataset)
    if first is not None:
        summary["first"] = first
    return summary


def test_read_shares_counts_indices_read_twice_and_never() -> None:
    bitmaps = [_reads(np.arange(0, 60))["bitmap"], _reads(np.arange(40, 90))["bitmap"]]
    assert read_shares(bitmaps, 100) == (20, 10)


def test_disjoint_halves_are_silent_and_the_sampler_padding_passes() -> None:
    assert check_rank_reads([_summary(0, range(0, 50)), _summary(1, range(50, 100))]) == []
    # DistributedSampler evens 99 rows out to 2 x 50 by repeating index 0 once.
    assert check_rank_reads([_summary(0, range(0, 50)), _summary(1, [*range(50, 99), 0])]) == []


def test_overlapping_epoch_indices_name_the_shares_repeated_and_never_read() -> None:
    (violation,) = check_rank_reads([_summary(0, range(0, 60)), _summary(1, range(30, 90))])
    assert violation.rule == "ranks-read-same-data" and violation.steps == ("shard",)
    assert "30.0% of it is read by more than one rank and 10.0% is never read" in violation.message
    assert violation.fix == RULES["ranks-read-same-data"].fix and "DistributedSampler" in violation.fix
    assert violation.details["repeated"] == pytest.approx(0.3) and violation.details[
        "never_read"
    ] == pytest.approx(0.1)


def test_every_rank_reading_all_data_is_all_repeated() -> None:
    (violation,) = check_rank_reads([_summary(0, range(100)), _summary(1, range(100))])
    assert violation.details["repeated"] == 1.0 and violation.details["never_read"] == 0.0


def test_indices_over_different_datasets_are_not_compared() -> None:
    # Each rank holds its own shard (sharded in setup): the same indices are other rows.
    summaries = [
        _summary(0, range(100), first=[1, 2, 3], dataset="a"),
        _summary(1, range(100), first=[4, 5, 6], dataset="b"),
    ]
    assert check_rank_reads(summaries) == []


def test_identical_first_batches_without_indices_are_reported() -> None:
    (violation,) = check_rank_reads([_summary(0, first=[1, 2, 3, 4]), _summary(1, first=[1, 2, 3, 4])])
    assert violation.rule == "ranks-read-same-data" and violation.details["evidence"] == "batches"
    assert "data-parallel ranks 0 and 1 draw identical first train batches (4 rows" in violation.message


@pytest.mark.parametrize("second", [[5, 6, 7, 8], [1, 2, 3, 5], []])
def test_different_or_missing_first_batches_are_silent(second) -> None:
    assert check_rank_reads([_summary(0, first=[1, 2, 3, 4]), _summary(1, first=second)]) == []


def test_a_repeated_single_row_is_no_evidence() -> None:
    assert check_rank_reads([_summary(0, first=[7, 7, 7]), _summary(1, first=[7, 7, 7])]) == []


def test_one_tensor_parallel_group_reading_the_same_data_is_silent() -> None:
    summaries = [_summary(r, range(100), first=[1, 2, 3], dp_rank=0) for r in range(2)]
    assert check_rank_reads(summaries) == []


def test_two_tensor_parallel_groups_are_compared_by_one_rank_each() -> None:
    # dp 2 x tp 2: ranks 0, 1 read share A, ranks 2, 3 share B; the same share on both groups is the error.
    good = [_summary(r, range(0, 50) if r < 2 else range(50, 100), dp_rank=r // 2) for r in range(4)]
    assert check_rank_reads(good) == []
    bad = [_summary(r, range(0, 50), dp_rank=r // 2) for r in range(4)]
    (violation,) = check_rank_reads(bad)
    assert "ranks 0, 2" in violation.message


def test_a_single_process_is_silent() -> None:
    assert check_rank_reads([_summary(0, range(100), first=[1, 2])]) == []


def test_a_sampler_drawing_with_replacement_is_judged_by_its_first_batches_only() -> None:
    """A weighted mixture's draw repeats indices within a rank's epoch, so ranks share indices by design."""
    drawn = [_summary(0, range(0, 60), first=[1, 2]), _summary(1, range(30, 90), first=[3, 4])]
    for summary in drawn:
        summary["reads"]["repeats"] = 12
    assert check_rank_reads(drawn) == []
    drawn[1]["first"] = [1, 2]  # the same rows first on both ranks: still caught
    assert [v.rule for v in check_rank_reads(drawn)] == ["ranks-read-same-data"]

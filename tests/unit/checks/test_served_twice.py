"""``rows-served-twice`` on plain counts (lightning_order/checks/served_twice.py)."""

from __future__ import annotations

from lightning_order.checks.served_twice import check_served_twice, served_rows
from lightning_order.rules import RULES


def _both(rows: int) -> list[tuple[int, int]]:
    """Two workers serving the same rows, batch by batch (a stream that forgets get_worker_info)."""
    return [
        (worker, row) for start in range(0, rows, 4) for worker in (0, 1) for row in range(start, start + 4)
    ]


def test_rows_from_two_workers_above_the_datasets_own_rate_are_proven():
    found = served_rows(_both(64), own=list(range(128)), workers=2)
    assert (found.rows, found.repeats, found.cross, found.own_repeats) == (128, 64, 64, 0)
    proven, suspected = check_served_twice(found)
    assert suspected == [] and [v.rule for v in proven] == ["rows-served-twice"]
    (violation,) = proven
    assert violation.steps == ("shard",) and violation.details["proven"] is True
    assert "2 workers serve the same rows" in violation.message and "get_worker_info" in violation.fix
    assert violation.fix == RULES["rows-served-twice"].fix


def test_repeats_the_dataset_holds_itself_are_silent():
    # Every document twice in a row: read with or without workers, half the rows repeat.
    served = [
        (w, r)
        for start in range(0, 64, 2)
        for w, r in ((0, start), (0, start), (1, start + 1), (1, start + 1))
    ]
    own = [r for r in range(64) for _ in range(2)]
    assert check_served_twice(served_rows(served, own, workers=2)) == ([], [])


def test_a_split_stream_is_silent_and_too_few_repeats_prove_nothing():
    split = [(i % 2, i) for i in range(128)]
    assert check_served_twice(served_rows(split, list(range(128)), workers=2)) == ([], [])
    few = [*split, (1, 0), (1, 2)]  # two coincidences: under MIN_HITS, within the noise
    assert check_served_twice(served_rows(few, list(range(130)), workers=2)) == ([], [])


def test_repeats_from_one_worker_above_the_datasets_rate_only_warn():
    one = [(0, r) for r in range(32) for _ in range(2)] + [(1, 100 + r) for r in range(64)]
    proven, suspected = check_served_twice(served_rows(one, list(range(128)), workers=2))
    assert proven == [] and [v.rule for v in suspected] == ["rows-served-twice"]
    assert suspected[0].details["proven"] is False and "Not proven" in suspected[0].message

"""checks/estimates.py and the rates extrapolated from samples (#26: honest statistics)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.datasets import check_twin_rate, twin_estimate
from lightning_order.checks.estimates import MIN_HITS, RateEstimate, wilson_interval
from lightning_order.checks.lm import check_lm


@pytest.mark.parametrize(("hits", "n"), [(0, 10), (1, 512), (97, 512), (512, 512), (3, 7)])
def test_wilson_interval_holds_the_observed_rate_within_0_and_1(hits: int, n: int) -> None:
    low, high = wilson_interval(hits, n)
    assert 0.0 <= low <= hits / n <= high <= 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="hits <= n"):
        wilson_interval(5, 4)


def test_an_exact_count_decides_by_itself_an_estimate_needs_min_hits_and_its_interval() -> None:
    assert RateEstimate(1, 100, exact=True).above(0.005)
    assert not RateEstimate(1, 100).above(0.005)  # one hit: no evidence, whatever the rate
    assert RateEstimate(MIN_HITS, 100).above(0.005)
    assert "interval" in RateEstimate(3, 100, coverage=0.5).describe("rows")


def test_one_hit_in_512_sampled_windows_is_no_violation() -> None:
    rng = np.random.default_rng(0)
    train = rng.integers(0, 2**62, size=512)  # 512 of 100 000 train windows hashed
    val = rng.integers(0, 2**62, size=512)
    val[7] = train[300]  # one coincidental twin, extrapolated by 1 / 0.5 % coverage
    estimate = twin_estimate(train, val, train_rows=100_000, val_rows=20_000)
    assert estimate is not None and estimate.hits == 1 and estimate.rate > 0.3  # the old check raised on it
    assert "1 of 512 sampled" in estimate.describe("windows") and estimate.hits < MIN_HITS
    assert check_twin_rate(train, val, train_rows=100_000, val_rows=20_000) == []


@pytest.mark.parametrize("coverage", [1.0, 0.5])
def test_a_19_percent_planted_overlap_is_reported_with_an_interval_that_contains_it(coverage: float) -> None:
    rng = np.random.default_rng(1)
    train = rng.integers(0, 2**62, size=20_000)
    val = rng.integers(0, 2**62, size=5_000)
    planted = rng.choice(val.size, size=round(0.19 * val.size), replace=False)
    val[planted] = rng.choice(train, size=planted.size, replace=False)
    hashed = train if coverage == 1.0 else rng.choice(train, size=int(coverage * train.size), replace=False)
    sampled = rng.choice(val, size=512, replace=False)  # 512 sampled validation windows
    (violation,) = check_twin_rate(hashed, sampled, train_rows=train.size, val_rows=val.size)
    low, high = violation.details["estimate"]["interval"]
    assert violation.rule == "train-val-overlap" and low < 0.19 < high
    assert violation.details["estimate"]["sampled"] == 512 and "95% interval" in violation.message


NO_EOS = {"eos_id": 0, "sampled_eos": 0, "sampled_tokens": 512 * 33, "sampled_rows": 512, "block_tokens": 33}


@pytest.mark.parametrize(("rows", "width", "fires"), [(512, 33, True), (512, 9, False), (64, 33, False)])
def test_no_end_of_text_is_decided_from_the_blocks_actually_sampled(
    rows: int, width: int, fires: bool
) -> None:
    evidence = {**NO_EOS, "sampled_rows": rows, "block_tokens": width, "sampled_tokens": rows * width}
    found = check_lm({**evidence, "rows_with_eos": 0})
    assert [v.rule for v in found] == (["pack-without-eos"] if fires else [])
    if fires:
        assert "512 sampled blocks" in found[0].message and "interval" in found[0].message
    assert check_lm({**evidence, "rows_with_eos": 3, "sampled_eos": 3}) == []

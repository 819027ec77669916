"""``mixture-off-weight`` (checks/mixture.py): realised train token shares against the stated weights."""

from __future__ import annotations

import pytest

from lightning_order.checks.mixture import check_mixture, check_mixture_records
from lightning_order.ledger import StepLedger
from lightning_order.rules import RULES


@pytest.mark.parametrize(
    ("shares", "tolerance"),
    [([0.7, 0.3], 0.01), ([0.705, 0.295], 0.01), ([0.71, 0.29], 0.01), ([0.66, 0.34], 0.05)],
)
def test_shares_within_the_tolerance_are_no_violation(shares: list[float], tolerance: float) -> None:
    assert check_mixture(["web", "code"], [0.7, 0.3], shares, tolerance) == []


@pytest.mark.parametrize(("shares", "off"), [([0.72, 0.28], ["web", "code"]), ([0.5, 0.5], ["web", "code"])])
def test_shares_beyond_the_tolerance_are_mixture_off_weight_naming_each_source(
    shares: list[float], off: list[str]
) -> None:
    [violation] = check_mixture(["web", "code"], [7, 3], shares, 0.01)  # weights normalised
    assert violation.rule == "mixture-off-weight" and violation.fix == RULES["mixture-off-weight"].fix
    assert violation.details["sources"] == off
    assert "source 'web': weight 70.00%" in violation.message and "±1 points" in violation.message


def _ledger(
    shares: list[float], served: list[float] | None = None, tolerance: float | None = None
) -> StepLedger:
    ledger = StepLedger()
    mixture = {"sources": ["web", "code"], "weights": [0.7, 0.3], "shares": shares, "tolerance": 0.01}
    ledger.record("pack", output="fp-pack", stats={"mixture": mixture})
    if served is not None:
        ledger.record(
            "shard",
            inputs={"pack": "fp-pack"},
            output="fp-shard",
            params={"mixture_tolerance": tolerance},
            stats={"mixture_shares": served},
        )
    return ledger


def test_a_ledger_without_a_mixture_has_nothing_to_judge() -> None:
    ledger = StepLedger()
    ledger.record("pack", output="fp-pack", stats={"train_blocks": 10})
    assert check_mixture_records(ledger) == []


def test_the_ledger_check_judges_what_shard_served_with_this_runs_tolerance() -> None:
    assert check_mixture_records(_ledger([0.7, 0.3])) == []
    assert [v.rule for v in check_mixture_records(_ledger([0.75, 0.25]))] == ["mixture-off-weight"]
    # the served epoch strays, though the draw did not
    assert [v.rule for v in check_mixture_records(_ledger([0.7, 0.3], [0.69, 0.31], 0.005))] == [
        "mixture-off-weight"
    ]
    assert check_mixture_records(_ledger([0.7, 0.3], [0.69, 0.31], 0.02)) == []

"""The readable report: a table of violations and the waste estimate."""

from __future__ import annotations

import pytest

from lightning_order.checks import format_report, merge_violations
from lightning_order.errors import OrderError
from lightning_order.rules import RULES, Violation


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_renders_with_its_symptom_and_fix(rule):
    violation = Violation(rule, ("a", "b"), f"something about {rule}")
    text = format_report([violation], devices=8, planned_hours=24, gpu_hour_price=2.0, where="setup (fit)")
    assert text.startswith("1 order violation found in setup (fit):")
    assert rule in text and "a > b" in text
    assert "8 devices × 24 h = 192.0 device-hours, about 384.00 at 2.00 per device-hour" in text
    error = OrderError([violation], header=text)
    assert error.rules == [rule] and f"something about {rule}" in str(error)


def test_merge_keeps_order_and_drops_repeats():
    a, b = Violation("cycle", ("x",), "m1"), Violation("cycle", ("x",), "m2")
    assert merge_violations([a, b], [Violation("cycle", ("x",), "m1")]) == [a, b]

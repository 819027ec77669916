"""Cost accounting: what a run spent (waste_report) and would have wasted (estimate_waste), one arithmetic."""

from __future__ import annotations

import math

import pytest

from lightning_order.checks import estimate_waste as estimate_from_checks
from lightning_order.cost import describe_waste, device_hours, estimate_waste, waste_report
from lightning_order.recovery import waste_report as waste_from_recovery


def test_one_implementation_behind_every_import_path() -> None:
    assert estimate_from_checks is estimate_waste and waste_from_recovery is waste_report


def test_waste_report_counts_device_hours_cost_and_progress() -> None:
    report = waste_report(1800, 8, step=250, planned_steps=1000, gpu_hour_price=2.0)
    assert report["device_hours"] == pytest.approx(4.0)
    assert report["cost"] == pytest.approx(8.0)
    assert report["progress"] == pytest.approx(0.25)
    bare = waste_report(60, step=3, planned_steps=math.inf)
    assert bare["cost"] is None and bare["progress"] is None and bare["planned_steps"] is None
    with pytest.raises(ValueError, match="num_devices"):
        waste_report(10, 0)


def test_waste_without_price_or_hours() -> None:
    assert "device-hours" in estimate_waste(2, 10) and "about" not in estimate_waste(2, 10)
    assert "planned_hours=" in estimate_waste(1)
    with pytest.raises(ValueError, match="devices"):
        estimate_waste(0)


def test_spent_and_projected_agree_on_the_same_run() -> None:
    # 8 devices for 24 h at 2.0: the projection and the report of the same hours say the same.
    spent = waste_report(24 * 3600, 8, gpu_hour_price=2.0)
    assert spent["device_hours"] == device_hours(24 * 3600, 8) == pytest.approx(192.0)
    assert "192.0 device-hours, about 384.00 at 2.00" in estimate_waste(8, 24, 2.0)
    assert spent["cost"] == pytest.approx(384.0)


def test_describe_waste_names_hours_cost_and_progress() -> None:
    text = describe_waste(waste_report(1800, 8, step=250, planned_steps=1000, gpu_hour_price=2.0))
    assert text == "4 device-hours on 8 device(s), cost 8.00, 25% of the planned 1000 steps"
    assert describe_waste(waste_report(3600)) == "1 device-hours on 1 device(s)"

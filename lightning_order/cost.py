"""What a run costs in device-hours and money: the one place cost is counted.

Two questions, one arithmetic (``seconds x devices / 3600``, times a price when given):

* :func:`waste_report` -- what a run *spent* so far (the pause and ``recover()`` read it);
* :func:`estimate_waste` -- what a run *would have wasted* had it gone on (the validator's report).

Pure functions of plain numbers; nothing here knows a Trainer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["describe_waste", "device_hours", "estimate_waste", "waste_report"]


def device_hours(seconds: float, devices: int = 1) -> float:
    """``seconds`` of wall time on ``devices`` devices, in device-hours.

    Raises:
        ValueError: negative time or fewer than one device.
    """
    if seconds < 0 or devices < 1:
        raise ValueError(f"expected elapsed seconds >= 0 and num_devices >= 1, got {seconds}, {devices}")
    return seconds * devices / 3600.0


def waste_report(
    elapsed_s: float,
    num_devices: int = 1,
    *,
    step: int = 0,
    planned_steps: float | None = None,
    gpu_hour_price: float | None = None,
) -> dict[str, Any]:
    """What a run spent so far, in device-hours and (with a price) money.

    Args:
        elapsed_s: wall seconds the run trained.
        num_devices: devices it held (all nodes together).
        step: the global step reached.
        planned_steps: the steps the run was going to take (``trainer.estimated_stepping_batches``);
            ``None`` or infinite when unknown.
        gpu_hour_price: the price of one device-hour; ``cost`` is ``None`` without it.

    Returns:
        ``{"elapsed_s", "num_devices", "device_hours", "cost", "gpu_hour_price", "step",
        "planned_steps", "progress"}`` where ``progress`` is ``step / planned_steps`` (or ``None``).
        Plain numbers only: the report travels inside checkpoints.
    """
    hours = device_hours(elapsed_s, num_devices)
    known = planned_steps is not None and math.isfinite(planned_steps) and planned_steps > 0
    return {
        "elapsed_s": float(elapsed_s),
        "num_devices": int(num_devices),
        "device_hours": hours,
        "cost": hours * gpu_hour_price if gpu_hour_price is not None else None,
        "gpu_hour_price": gpu_hour_price,
        "step": int(step),
        "planned_steps": float(planned_steps) if known else None,
        "progress": min(step / planned_steps, 1.0) if known else None,
    }


def describe_waste(waste: Mapping[str, Any]) -> str:
    """A :func:`waste_report` in words: device-hours, cost and progress where known."""
    text = f"{waste['device_hours']:.3g} device-hours on {waste['num_devices']} device(s)"
    if waste.get("cost") is not None:
        text += f", cost {waste['cost']:.2f}"
    if waste.get("progress") is not None:
        text += f", {waste['progress']:.0%} of the planned {int(waste['planned_steps'])} steps"
    return text


def estimate_waste(
    devices: int, planned_hours: float | None = None, gpu_hour_price: float | None = None
) -> str:
    """One sentence on what the run would have wasted had it gone on.

    Args:
        devices: devices the run uses (all nodes together).
        planned_hours: how long the run was planned to train, in hours.
        gpu_hour_price: the price of one device-hour (any currency).

    Returns:
        ``devices × planned hours`` device-hours, priced when a price is given.
    """
    if devices < 1:
        raise ValueError(f"devices must be at least 1, got {devices}")
    unit = "device" if devices == 1 else "devices"
    if planned_hours is None:
        return (
            f"Left running, every device-hour of this run ({devices} {unit} × its planned hours) would have "
            "trained on wrong data; pass planned_hours= (and gpu_hour_price=) to OrderValidator for a figure."
        )
    planned = waste_report(planned_hours * 3600.0, devices, gpu_hour_price=gpu_hour_price)
    text = (
        f"Left running, this run would have wasted {devices} {unit} × {planned_hours:g} h = "
        f"{planned['device_hours']:,.1f} device-hours"
    )
    if planned["cost"] is not None:
        text += f", about {planned['cost']:,.2f} at {gpu_hour_price:,.2f} per device-hour"
    return text + "."

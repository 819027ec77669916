"""The reports a user reads: the validator's violations, the monitor's diagnoses.

Pure text from plain inputs. :func:`format_report` turns the violations, the number of devices,
the planned hours and, when the user gives one, the price of a device-hour into the report the
validator raises or warns with (the waste sentence comes from :mod:`lightning_order.cost`,
where every cost is counted); the table is drawn with ``rich`` (no colour, fixed width) so it
reads the same in a terminal, a log file and an exception message. :func:`format_diagnoses` is
what ``SymptomMonitor`` prints at the end of fit.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from lightning_order.cost import estimate_waste
from lightning_order.rules import Violation

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.checks.symptoms import Diagnosis

__all__ = ["estimate_waste", "format_diagnoses", "format_report", "merge_violations"]


def merge_violations(*groups: Iterable[Violation]) -> list[Violation]:
    """The violations of all groups in order, each (rule, steps, message) once."""
    seen: dict[tuple[str, tuple[str, ...], str], Violation] = {}
    for group in groups:
        for violation in group:
            seen.setdefault((violation.rule, violation.steps, violation.message), violation)
    return list(seen.values())


def format_report(
    violations: Sequence[Violation],
    *,
    devices: int = 1,
    planned_hours: float | None = None,
    gpu_hour_price: float | None = None,
    where: str = "",
    width: int = 110,
) -> str:
    """A readable table of violations with the waste estimate.

    Args:
        violations: what the checks found.
        devices: devices the run uses, for the waste estimate.
        planned_hours: planned training hours, for the waste estimate.
        gpu_hour_price: price of a device-hour, for the waste estimate.
        where: where the checks ran (e.g. ``"OrderValidator.setup (fit)"``), for the first line.
        width: the table's width in characters.

    Returns:
        The title line, the table (rule, steps, symptom, fix) and the estimate.
    """
    count = len(violations)
    title = f"{count} order violation{'s' if count != 1 else ''} found" + (f" in {where}" if where else "")
    table = Table(box=box.SIMPLE_HEAD, show_lines=False, expand=False, pad_edge=False)
    table.add_column("rule", no_wrap=True)
    table.add_column("steps")
    table.add_column("symptom", ratio=3)
    table.add_column("fix", ratio=3)
    for violation in violations:
        table.add_row(violation.rule, " > ".join(violation.steps), violation.symptom, violation.fix)
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False, soft_wrap=False).print(table)
    rendered = "\n".join(line.rstrip() for line in buffer.getvalue().strip("\n").splitlines())
    lines = [title + ":", rendered, estimate_waste(devices, planned_hours, gpu_hour_price)]
    return "\n".join(lines) + "\nDetails:"


def format_diagnoses(diagnoses: Sequence[Diagnosis], pause_path: str | None = None) -> str:
    """The monitor's diagnoses as readable text: what was seen, and which of it names an order error.

    Args:
        diagnoses: what the symptom detectors found.
        pause_path: the checkpoint the monitor paused the run into, if it did.
    """
    if not diagnoses:
        return "SymptomMonitor: no symptom seen."
    named = sum(d.names_order_error for d in diagnoses)
    lines = [f"SymptomMonitor: {len(diagnoses)} symptom(s) seen, {named} attributed to an order error:"]
    lines += [f"  {number}. {d.describe()}" for number, d in enumerate(diagnoses, start=1)]
    if pause_path:
        lines.append(f"  The run was paused: {pause_path}; see lightning_order.recover().")
    return "\n".join(lines)

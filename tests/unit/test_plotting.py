"""The loss curve PNG (lightning_order/plotting.py): a valid PNG of the figure's size, or nothing.

Written by a fit's summary: tests/integration/test_command_line.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import png_size

from lightning_order.plotting import LOSS_CURVE_FILE, write_loss_curve


def test_the_curve_is_a_png_of_the_figure_size(tmp_path: Path) -> None:
    train = [(step, 5.0 - 0.01 * step) for step in range(1, 200)]
    val = [(50, 4.6), (100, 4.2), (199, 3.9)]
    written = write_loss_curve(tmp_path / "logs" / LOSS_CURVE_FILE, train, val)
    assert written == tmp_path / "logs" / LOSS_CURVE_FILE
    assert png_size(written) == (640, 400)
    assert written.stat().st_size > 10_000  # axes, two lines, a legend: not an empty canvas


@pytest.mark.parametrize(("train", "val"), [([], []), ([(1, 2.0)], []), ([], [(1, 2.0)])])
def test_a_curve_is_drawn_from_any_points_and_nothing_from_none(
    tmp_path: Path, train: list[tuple[int, float]], val: list[tuple[int, float]]
) -> None:
    written = write_loss_curve(tmp_path / "curve.png", train, val)
    assert (written is None) == (not train and not val)
    assert (tmp_path / "curve.png").exists() == (written is not None)

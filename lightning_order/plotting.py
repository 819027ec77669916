"""The loss curve of a run (train and validation loss against the optimizer step), as a PNG file.

Drawn with matplotlib's object API (``Figure`` on an Agg canvas): no pyplot, so no global state,
no window and no backend to choose, which keeps it quiet under CI and tests. matplotlib is an
optional dependency (``pip install 'lightning-order[plots]'``): without it nothing is drawn and
:func:`write_loss_curve` says so by returning ``None``, rather than making every install carry a
plotting library for one figure.
"""

from __future__ import annotations

import importlib.util
import io
from collections.abc import Sequence
from pathlib import Path

from lightning_order.outputs import write_file

__all__ = ["LOSS_CURVE_FILE", "can_plot", "write_loss_curve"]

#: The file name of the loss curve, written in the run's log folder.
LOSS_CURVE_FILE = "loss_curve.png"


def can_plot() -> bool:
    """Whether matplotlib is installed (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def write_loss_curve(
    path: str | Path,
    train: Sequence[tuple[int, float]],
    val: Sequence[tuple[int, float]] = (),
    *,
    title: str = "train and validation loss",
) -> Path | str | None:
    """Draws the train and validation loss against the optimizer step and saves it as a PNG.

    Args:
        path: the PNG file to write, local or an fsspec URL as the run's logs (its folder is made
            if missing).
        train: ``(step, loss)`` of each training step.
        val: ``(step, loss)`` of each validation pass (drawn as points joined by a line).
        title: the figure's title.

    Returns:
        The path written (a ``Path`` when local), or ``None`` when there is nothing to draw or
        matplotlib is not installed.

    Raises:
        OSError: the file cannot be written (the message names it).
    """
    if not (train or val) or not can_plot():
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)  # attaches itself to the figure: savefig then renders with Agg
    axes = figure.add_subplot()
    if train:
        steps, losses = zip(*train)
        axes.plot(steps, losses, label="train", linewidth=1.0, color="tab:blue")
    if val:
        steps, losses = zip(*val)
        axes.plot(steps, losses, label="validation", marker="o", linewidth=1.5, color="tab:orange")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("loss")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return write_file(path, png.getvalue())

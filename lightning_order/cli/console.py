"""What ``lightning-order`` prints: tables, run summaries, and user errors as one line each.

Kept apart from :mod:`lightning_order.cli` (which parses and runs) so the wording of every
message lives in one place. Output goes through ``rich`` without markup in user text.
"""

from __future__ import annotations

import contextlib
import errno
import re
from argparse import ArgumentError
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lightning_order.cli.rendering import ledger_rows
from lightning_order.errors import LightningOrderError, OrderError
from lightning_order.ledger import MANIFEST_NAME, StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.outputs import exists
from lightning_order.pipelines import spec_for
from lightning_order.rules import Violation

if TYPE_CHECKING:  # torch and Lightning are imported where used: `audit` and `graph` need neither
    from pytorch_lightning import Trainer

__all__ = [
    "ConfigurationError",
    "configuration_errors",
    "console",
    "error_lines",
    "ledger_table",
    "locations",
    "never_validated",
    "one_line",
    "prepare_report",
    "print_error",
    "print_violations",
    "scalar_metrics",
]


class ConfigurationError(LightningOrderError, ValueError):
    """A configured class refused its arguments (a bare ``ValueError`` from its constructor)."""


@contextlib.contextmanager
def configuration_errors() -> Iterator[None]:
    """Turns a bare ``ValueError`` of a configured constructor into a lightning_order error."""
    try:
        yield
    except LightningOrderError:
        raise
    except ValueError as err:
        raise ConfigurationError(f"{err} (the configuration was refused: fix the option it names)") from err


class _Console(Console):
    """rich's console, but a closed pipe is left to the command's exit code (rich exits 1: "violations" to ``audit``)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def console(stderr: bool = False) -> Console:
    """A rich console for the CLI's output: whole lines (greppable logs), tables at least 120 wide off a terminal."""
    console = _Console(stderr=stderr, soft_wrap=True)  # messages stay whole lines (greppable logs)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # logs and CI: no table squeezed to 80 columns
    return console


def ledger_table(
    ledger: StepLedger, title: str | None = None, pipeline: Pipeline = STANDARD_PIPELINE
) -> Table:
    """The ledger as a rich table: step, seq, kind, fitted on, rows, fingerprint.

    Args:
        ledger: the records to show.
        title: the table's title.
        pipeline: where step kinds come from.
    """
    table = Table(title=title, title_justify="left")
    for column, justify in (
        ("step", "left"),
        ("seq", "right"),
        ("kind", "left"),
        ("fitted on", "left"),
        ("rows", "right"),
        ("fingerprint", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in ledger_rows(ledger, pipeline):
        table.add_row(*(Text(cell) for cell in row))  # Text: no rich markup in step names
    return table


def print_violations(console: Console, violations: Sequence[Violation]) -> None:
    """The violations, numbered, or a line saying the order is correct."""
    if not violations:
        console.print(Text("✓ the order is correct: no violation", style="green"))
        return
    count = len(violations)
    console.print(Text(f"✗ {count} order violation{'s' if count != 1 else ''}:", style="bold red"))
    for number, violation in enumerate(violations, start=1):
        console.print(Text(f"  {number}. {violation.describe()}"))


def prepare_report(datamodule: Any) -> None:
    """What `lightning-order prepare` prints: the ledger, its verdict, the dims and where the data is."""
    out = console()
    cache_path = getattr(datamodule, "cache_path", None)
    ledger = None
    if cache_path is not None and (Path(cache_path) / MANIFEST_NAME).is_file():
        ledger = StepLedger.load(cache_path)
    elif isinstance(getattr(datamodule, "ledger", None), StepLedger):
        ledger = datamodule.ledger
    if ledger is not None:
        spec = spec_for(ledger=ledger)  # the manifest names its pipeline
        pipeline = getattr(datamodule, "pipeline", None) or spec.pipeline
        out.print(ledger_table(ledger, title="lightning-order prepare: the ledger", pipeline=pipeline))
        print_violations(out, spec.check(ledger, pipeline))
        dims = ledger.info.get("dims")
        if dims:
            out.print(Text.assemble(("dims: ", "bold"), ", ".join(f"{k}={v}" for k, v in dims.items())))
        for label, text in spec.ledger_figures(ledger):
            out.print(Text.assemble((f"{label}: ", "bold"), text))
    if cache_path is not None:
        out.print(Text.assemble(("prepared data: ", "bold"), str(cache_path)))
        out.print(Text.assemble(("manifest: ", "bold"), str(Path(cache_path) / MANIFEST_NAME)))


def scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics that are single numbers, as floats."""
    import torch

    scalars = {}
    for name, value in metrics.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)):
            scalars[name] = float(value)
    return scalars


def print_metrics(console: Console, metrics: dict[str, float]) -> None:
    """Prints ``metrics`` (from :func:`scalar_metrics`) as a two-column table; nothing when empty."""
    if not metrics:
        return
    table = Table(title="final metrics", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in sorted(metrics.items()):
        table.add_row(name, f"{value:.4f}")
    console.print(table)


def locations(datamodule: Any, trainer: Trainer, stage: str) -> list[tuple[str, Any]]:
    """Where a run left its cache, checkpoints and logs, as (label, path) pairs: only paths that exist."""
    found: list[tuple[str, Any]] = []
    cache_path = getattr(datamodule, "cache_path", None)
    if cache_path is not None:
        found.append(("prepared data (cache)", cache_path))
    checkpoint = trainer.checkpoint_callback
    if stage != "fit":
        if trainer.ckpt_path:
            found.append(("checkpoint evaluated", trainer.ckpt_path))
    elif checkpoint is not None:
        best = getattr(checkpoint, "best_model_path", "")
        last = getattr(checkpoint, "last_model_path", "")
        dirpath = getattr(checkpoint, "dirpath", None)
        if best:
            found.append(("best checkpoint", best))
        elif last:
            found.append(("last checkpoint", last))
        elif dirpath:
            found.append(("checkpoints", dirpath))
    logger = trainer.logger
    log_dir = getattr(logger, "log_dir", None) if logger is not None else None
    if log_dir:
        found.append(("logs and config", log_dir))
    # A checkpoint folder is named before anything is saved in it (a run cut short saves nothing).
    # A URL (s3://, memory://) is asked of its own storage, as the run wrote there.
    return [(label, where) for label, where in found if where and exists(where)]


def never_validated(trainer: Trainer, datamodule: Any) -> bool:
    """Whether a finished fit logged no validation metric though it could have validated.

    ``False`` after an interrupted fit, with validation turned off (``limit_val_batches=0``), or
    for a datamodule without validation data.
    """
    if trainer.interrupted or not trainer.limit_val_batches:
        return False
    if not callable(getattr(datamodule, "val_dataloader", None)):
        return False
    return not any(name.startswith("val") for name in trainer.callback_metrics)


def one_line(text: object) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return re.sub(r"\s+", " ", str(text)).strip()


def error_lines(error: BaseException, command: str = "lightning-order") -> list[str]:
    """What :func:`main` prints for a user error: one line per finding, each with its fix.

    Args:
        error: a :class:`~lightning_order.errors.LightningOrderError` or a jsonargparse
            ``ArgumentError``.
        command: the command, for the first word of the first line.

    Returns:
        For an :class:`~lightning_order.errors.OrderError`, a line saying where it was found,
        then per violation its rule and message and a ``fix:`` line; for a rejected command line,
        jsonargparse's message without the usage, and where to find the options; for any other
        error, its message on one line (our messages carry their fix).
    """
    if isinstance(error, ArgumentError):
        return [f"{command}: error: {one_line(error.message)}", f"  see `{command} --help` for the options"]
    if isinstance(error, OrderError):
        where = one_line(str(error).splitlines()[0]).rstrip(":")
        lines = [f"{command}: OrderError: {where}"]
        for violation in error.violations:
            lines += [
                f"  [{violation.rule}] {one_line(violation.message)}",
                f"    fix: {one_line(violation.fix)}",
            ]
        return lines
    name = "ValueError" if isinstance(error, ConfigurationError) else type(error).__name__
    return [f"{command}: {name}: {one_line(error)}"]


def print_error(lines: list[str]) -> None:
    """Prints :func:`error_lines` on stderr, the first line in bold red."""
    err = console(stderr=True)
    err.print(Text(lines[0], style="bold red"))
    for line in lines[1:]:
        err.print(Text(line))

"""The errors and warnings of lightning_order.

One base class, :class:`LightningOrderError`, and subclasses that also inherit the built-in kind
a caller would expect (``OrderError`` is a ``RuntimeError``, ``DataError`` a ``ValueError``), so
``except ValueError`` keeps working for users who do not know this library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from lightning_order.rules import Violation

__all__ = [
    "CacheWarning",
    "CheckpointError",
    "DataError",
    "FingerprintError",
    "LightningOrderError",
    "ManifestError",
    "NotFiniteError",
    "OrderError",
    "OrderWarning",
    "OutputError",
    "OutputWarning",
    "StepNameError",
    "unknown_step_names",
]


class LightningOrderError(Exception):
    """Base class of every error raised by lightning_order."""


class OrderError(LightningOrderError, RuntimeError):
    """Steps ran (or were about to run) in an order that silently breaks training.

    Args:
        violations: what was found; each carries a stable ``rule`` code users can match on.
        header: an optional first line for the message (e.g. where the check ran).

    Attributes:
        violations: the list of :class:`~lightning_order.order.Violation`.
        rules: the rule codes of the violations, in order, without duplicates.
    """

    def __init__(self, violations: Iterable[Violation], header: str | None = None) -> None:
        self.violations = list(violations)
        self.header = header
        super().__init__(self._render())

    @property
    def rules(self) -> list[str]:
        """The distinct rule codes of the violations, in the order found."""
        return list(dict.fromkeys(v.rule for v in self.violations))

    def _render(self) -> str:
        count = len(self.violations)
        lines = [self.header or f"{count} order violation{'s' if count != 1 else ''} found:"]
        for number, violation in enumerate(self.violations, start=1):
            lines.append(f"  {number}. {violation.describe()}")
        return "\n".join(lines)

    # Keeps the error picklable across processes (DDP spawn, num_proc).
    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.violations, self.header))


class OrderWarning(UserWarning):
    """The warning issued instead of :class:`OrderError` in warn mode; filter it like any warning."""


class CacheWarning(UserWarning):
    """A prepared cache was found damaged (the message names each bad file) and is prepared anew."""


class OutputError(LightningOrderError, OSError):
    """A file or folder beside a run (the tokenizer folder, the loss curve) is not ours to replace:
    a user's folder, a file, a symlink, or a folder of ours changed since; the message names the
    path and the fix."""


class OutputWarning(UserWarning):
    """A file or folder beside a run was left unwritten (the message names the path, why, and the
    fix); training goes on, as a run that trained is worth more than the file."""


class NotFiniteError(LightningOrderError, FloatingPointError):
    """A model's outputs are NaN or infinite (its loss diverged): nothing can be sampled from it."""


class DataError(LightningOrderError, ValueError):
    """The input data cannot be prepared: the message names the step, the column and the fix.

    Args:
        message: what is wrong and what to do.
        step: the pipeline step that found the problem.
        column: the offending column, when there is one.
    """

    def __init__(self, message: str, *, step: str | None = None, column: str | None = None) -> None:
        self.step = step
        self.column = column
        where = []
        if step is not None:
            where.append(f"step '{step}'")
        if column is not None:
            where.append(f"column '{column}'")
        prefix = f"[{', '.join(where)}] " if where else ""
        super().__init__(prefix + message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_data_error, (str(self), self.step, self.column))


def _rebuild_data_error(text: str, step: str | None, column: str | None) -> DataError:
    error = DataError.__new__(DataError)
    ValueError.__init__(error, text)
    error.step, error.column = step, column
    return error


class ManifestError(LightningOrderError, ValueError):
    """A ledger manifest is unreadable, truncated, tampered with, or of an unknown format."""


class CheckpointError(LightningOrderError, ValueError):
    """A checkpoint cannot be used safely or as asked: it holds more than plain data (and is
    therefore not unpickled), or it names a class that must be passed explicitly."""


class FingerprintError(LightningOrderError, TypeError):
    """A value cannot be fingerprinted by its content (only by a ``repr`` that hides it): the message
    names its type and how to pass a fingerprint instead."""


class StepNameError(LightningOrderError, ValueError):
    """A step name that the pipeline in use does not have (raised where the name is written, e.g. at
    decoration time), listing the valid names: a misspelled step can never switch a check off."""


def unknown_step_names(
    unknown: Sequence[str],
    steps: Sequence[str],
    *,
    where: str = "",
    pipeline: str = "",
    theirs: Sequence[str] = (),
) -> StepNameError:
    """The error for step names that a pipeline does not have, listing its steps and the closest one.

    Args:
        unknown: the names that are no step.
        steps: the pipeline's steps, in order.
        where: what is being declared, for the message.
        pipeline: the name of our other pipeline that has the names in ``theirs`` (``"LM_PIPELINE"``):
            the advice is then to pass it, not to extend this one.
        theirs: the names of ``unknown`` that are steps of ``pipeline``.
    """
    close = {n: difflib.get_close_matches(n, list(steps), n=1) for n in unknown if n not in theirs}
    hints = "".join(f" ('{n}': did you mean '{c[0]}'?)" for n, c in close.items() if c)
    hints += "".join(f" ('{n}' is a step of {pipeline})" for n in theirs)
    advice = f"pass pipeline={pipeline}" if theirs else "add your own with Pipeline.extend"
    return StepNameError(
        f"{where + ': ' if where else ''}unknown step name{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(repr(n) for n in unknown)}{hints}; the pipeline's steps are {', '.join(steps)} ({advice})"
    )

"""Whether a checkpoint's data position is one a run can have stopped at (``resume-position``).

Every copy of the position a checkpoint holds (the validator's state, our top-level entry, the
train loader's own state) can be edited alike, so their agreeing proves nothing. What does: the
position's own arithmetic (within its epoch, whole global batches) and Lightning's count in the
same checkpoint, which Lightning writes itself and restores from. The field types are
:func:`lightning_order.positions.check_position`'s (a ``CheckpointError``); where the resumed
loader will read is :func:`lightning_order.checks.resume.check_resume_position`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_order.rules import Violation

__all__ = ["check_stored_position", "stored_loop_count"]


def stored_loop_count(checkpoint: Mapping[str, Any]) -> dict[str, int] | None:
    """Lightning's own count of where the checkpoint's run stood: ``{"epoch", "batches"}``, or ``None``.

    Read from the fit loop's progress in the checkpoint (``epoch_progress`` and
    ``epoch_loop.batch_progress``), which Lightning writes itself and restores from: the count a
    data position must agree with. The epoch is the one started last, as
    :func:`~lightning_order.callbacks.validator.resume.saved_position` names it.
    """
    fit_loop = (checkpoint.get("loops") or {}).get("fit_loop")
    if not isinstance(fit_loop, Mapping):
        return None
    try:
        started = fit_loop["epoch_progress"]["current"]["started"]
        ready = fit_loop["epoch_loop.batch_progress"]["current"]["ready"]
    except (KeyError, TypeError):  # another Lightning version's layout: nothing to compare with
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (started, ready)):
        return None
    return {"epoch": max(0, started - 1), "batches": ready}


def _position_fault(stored: Mapping[str, Any], loop: Mapping[str, int] | None) -> str | None:
    """What makes ``stored`` a position no run reads from (beyond its epoch, mid-batch, not Lightning's count)."""
    samples, g = stored["samples"], stored["global_batch"]
    ends = [
        (int(stored[key]), what)
        for key, what in (("epoch_samples", "the epoch serves"), ("dataset_size", "the train split holds"))
        if stored.get(key) is not None
    ]
    if stored.get("epoch_batches") is not None:
        ends.append((int(stored["epoch_batches"]) * g, "Lightning's epoch reads"))
    beyond = next(((end, what) for end, what in ends if samples > end), None)
    if beyond is not None:
        return f"samples={samples} lies beyond the {beyond[0]} samples {beyond[1]} (epoch {stored['epoch']})"
    if samples % g:
        return (
            f"samples={samples} is not a whole number of global batches of {g}: no step ends mid-batch "
            f"({samples // g} batches and {samples % g} samples)"
        )
    if loop is not None and loop["epoch"] == int(stored["epoch"]) and loop["batches"] * g != samples:
        return (
            f"samples={samples} ({samples // g} batches of {g}) disagrees with Lightning's own loop in the same "
            f"checkpoint, which counts {loop['batches']} batches of epoch {loop['epoch']} done "
            f"({loop['batches'] * g} samples)"
        )
    return None


def check_stored_position(
    stored: Mapping[str, Any] | None, loop: Mapping[str, int] | None = None
) -> list[Violation]:
    """``resume-position``: the checkpoint's data position is one no run can have stopped at.

    Every copy of a position can be edited alike, so the copies agreeing proves nothing; what
    proves it is its own arithmetic and Lightning's count. A position beyond its epoch's length
    would silently start the next epoch, one that is not a multiple of the global batch would
    start mid-batch, and one that disagrees with the fit loop's batch count in the same
    checkpoint would skip or replay the batches between them.

    Args:
        stored: the checkpoint's position (:func:`stored_position`); ``None`` or without
            ``samples`` and ``global_batch``: nothing to judge.
        loop: Lightning's count in the same checkpoint (:func:`stored_loop_count`), or ``None``.

    Returns:
        One violation naming the field, the value and what it contradicts, or nothing.
    """
    if not stored or stored.get("samples") is None or not stored.get("global_batch"):
        return []
    fault = _position_fault(stored, loop)
    if fault is None:
        return []
    return [
        Violation(
            "resume-position",
            ("train",),
            f"the checkpoint's data position is impossible: {fault}; the checkpoint was edited or damaged, "
            "and resuming it would skip or replay samples without a word",
            fix="resume from an intact checkpoint of this run; or keep only its weights "
            "(torch.load(path, weights_only=True)['state_dict'] into the model) and fit without ckpt_path, "
            "which starts the data at the head of an epoch",
            details={"stored": dict(stored), "loop": dict(loop) if loop else None},
        )
    ]

"""Pure decisions on a paused checkpoint's payload: which repair path, and continue or restart.

Plain functions of plain data (the reasons and the waste report a pause stored, a share of kept
weights), so every decision is testable without a model, a checkpoint or a Trainer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from lightning_order.cost import describe_waste

__all__ = ["Advice", "Path", "advise", "choose_path", "kept_share"]

Path = Literal["data", "init", "resume"]
Advice = Literal["continue", "restart"]

# Symptoms whose fix changes neither the prepared data nor the model: resume the checkpoint.
_RESUME_SYMPTOMS = {"data-starvation", "memory-swing"}
_INIT_RULES = {"init-before-data"}


def choose_path(reasons: Sequence[Mapping[str, Any]]) -> Path:
    """The repair a pause's reasons call for.

    ``resume`` when every reason is a diagnosis of a symptom that leaves data and weights sound;
    ``init`` when every rule involved is ``init-before-data``; ``data`` otherwise (and when the
    checkpoint gives no reason: re-preparing in the mandated order is the safe repair).
    """
    symptoms = {r.get("symptom") for r in reasons if r.get("type") == "diagnosis"}
    rules = {r.get("suspected_rule") or r.get("rule") for r in reasons}
    if reasons and symptoms and symptoms <= _RESUME_SYMPTOMS and len(symptoms) == len(reasons):
        return "resume"
    if rules and rules <= _INIT_RULES:
        return "init"
    return "data"


def kept_share(sizes: Mapping[str, int], kept: Sequence[str]) -> float:
    """The share of weight elements (``sizes``: name -> element count) that ``kept`` covers."""
    total = sum(sizes.values()) or 1
    return sum(sizes[name] for name in kept if name in sizes) / total


def advise(
    path: Path, waste: Mapping[str, Any], share: float, restart_below: float, min_kept: float
) -> tuple[Advice, str]:
    """Continue from the repaired weights or restart, and why in words.

    Args:
        path: the repair path taken.
        waste: the paused run's waste report (may be empty).
        share: the share of weight elements kept or remapped.
        restart_below: restart when the run got less than this share of its planned steps.
        min_kept: restart when less than this share of the weights could be kept.
    """
    spent = describe_waste(waste) if waste else "an unknown amount of device time"
    if path == "resume":
        return "continue", f"the data and the model are sound; fix the loader and resume ({spent} kept)"
    progress = waste.get("progress") if waste else None
    if progress is not None and progress < restart_below:
        return "restart", (
            f"the run had spent {spent}, under {restart_below:.0%} of its plan: a clean restart "
            "costs little and carries nothing of the wrong order"
        )
    if share < min_kept:
        return "restart", (
            f"only {share:.0%} of the weights could be kept (under {min_kept:.0%}); the run had "
            f"spent {spent}: restart"
        )
    return "continue", (
        f"{share:.0%} of the weights are kept or remapped, worth the {spent} already spent: "
        "train on from them with a fresh optimizer"
    )

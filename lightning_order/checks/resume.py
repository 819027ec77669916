"""Resume check: was the checkpoint trained on the data this run prepared?

Weights learned on one vocabulary read another vocabulary's token ids as other words; features
scaled with other statistics shift every input. Neither crashes when the sizes happen to match,
so the check compares the data fingerprints stored with the checkpoint to the current ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from lightning_order.rules import Violation

__all__ = ["check_resume"]

# What a change of each fingerprint means for the restored weights, and the step behind it.
_CONSEQUENCE: dict[str, tuple[str, tuple[str, ...]]] = {
    "vocab": ("the vocabulary changed: token ids would silently mean other words", ("build_vocab",)),
    "statistics": (
        "the feature statistics changed: every numeric input is scaled differently",
        ("fit_features",),
    ),
    "split": (
        "the train/validation split changed: validation rows may have been trained on",
        ("split",),
    ),
    "manifest": ("the prepared data changed", ("encode",)),
}


def check_resume(stored: Mapping[str, str] | None, current: Mapping[str, str] | None) -> list[Violation]:
    """``resume-data-changed``: the checkpoint's data fingerprints differ from this run's.

    Fingerprints present on one side only are skipped (a checkpoint from an older version, or a
    datamodule without that artefact): only a difference is evidence.

    Args:
        stored: the fingerprints saved with the checkpoint (``{"manifest", "split", "statistics", "vocab"}``).
        current: this run's ``data_fingerprints()``.

    Returns:
        One violation naming every changed fingerprint, or nothing.
    """
    if not stored or not current:
        return []
    changed = [
        key
        for key, value in stored.items()
        if value is not None and current.get(key) is not None and str(value) != str(current[key])
    ]
    if not changed:
        return []
    # The most telling change leads (the manifest changes with anything, so it comes last).
    known = list(_CONSEQUENCE)
    changed.sort(key=lambda k: known.index(k) if k in known else len(known))
    reasons = [_CONSEQUENCE[k][0] if k in _CONSEQUENCE else f"'{k}' changed" for k in changed]
    steps = tuple(dict.fromkeys(s for k in changed for s in _CONSEQUENCE.get(k, ("", ("encode",)))[1]))
    detail = ", ".join(f"{k} {str(stored[k])[:12]} -> {str(current[k])[:12]}" for k in changed)
    return [
        Violation(
            "resume-data-changed",
            steps,
            f"{'; '.join(reasons)} (checkpoint -> this run: {detail})",
            details={"changed": changed, "stored": dict(stored), "current": dict(current)},
        )
    ]

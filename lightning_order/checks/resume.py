"""Resume check: was the checkpoint trained on the data this run prepared?

Weights learned on one vocabulary read another vocabulary's token ids as other words; features
scaled with other statistics shift every input. Neither crashes when the sizes happen to match,
so the check compares the data fingerprints stored with the checkpoint to the current ones. A
checkpoint without fingerprints proves nothing (:func:`check_resume_proof`), and weights whose
shapes do not fit are named by the order error behind them (:func:`check_restore_shapes`), never
left to a raw ``Error(s) in loading state_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.rules import Violation

__all__ = ["check_restore_shapes", "check_resume", "check_resume_proof", "stored_fingerprints"]

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
    "corpus": ("the corpus changed: the run would skip or replay documents", ("load",)),
    "tokenizer": ("the tokenizer changed: token ids would silently mean other text", ("build_vocab",)),
    "manifest": ("the prepared data changed", ("encode",)),
}


def stored_fingerprints(checkpoint: Mapping[str, Any], state_key: str, owner: str) -> dict[str, str]:
    """The data fingerprints a checkpoint was trained on (the ``stored`` side of the checks below).

    Args:
        checkpoint: the checkpoint, as plain data.
        state_key: the validator's state key; its state holds the fingerprints.
        owner: the validator's class name: a state saved under another key of that class (another
            pipeline's) will do; else the top-level copy under ``CHECKPOINT_KEY``.
    """
    states = checkpoint.get("callbacks") or {}
    state = states.get(state_key)
    if state is None:  # saved under another pipeline's key: any state of the owner will do
        state = next((s for k, s in states.items() if str(k).startswith(owner)), None)
    if isinstance(state, Mapping) and state.get("fingerprints"):
        return dict(state["fingerprints"])
    return dict((checkpoint.get(CHECKPOINT_KEY) or {}).get("fingerprints") or {})


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


def check_resume_proof(
    stored: Mapping[str, str] | None, current: Mapping[str, str] | None
) -> list[Violation]:
    """A checkpoint without data fingerprints cannot prove that this run's data is the one it learned.

    A checkpoint written without ``OrderValidator`` carries no fingerprints; resuming it onto
    other data (another vocabulary of the same size, other statistics) would go unnoticed. Only
    reported when this run has fingerprints to compare (an ``OrderedDataModule`` or one that
    offers ``data_fingerprints()``).

    Args:
        stored: the fingerprints saved with the checkpoint (``None`` or empty when it has none).
        current: this run's ``data_fingerprints()``.

    Returns:
        One ``resume-data-changed`` violation (the change cannot be ruled out), or nothing.
    """
    if stored or not current:
        return []
    return [
        Violation(
            "resume-data-changed",
            ("encode",),
            "the checkpoint carries no data fingerprints (it was saved by a run without OrderValidator): "
            f"lightning_order cannot prove the data is unchanged (this run: {', '.join(sorted(current))})",
            fix="resume only with the data config the checkpoint was trained on and pass "
            "OrderValidator(on_violation='warn') to accept it once; checkpoints saved with OrderValidator "
            "carry the proof. Or warm-start with lightning_order.recover(path, model_cls=...)",
            details={"stored": {}, "current": dict(current)},
        )
    ]


def check_restore_shapes(
    stored: Mapping[str, tuple[int, ...]],
    model: Mapping[str, tuple[int, ...]],
    model_fits_data: bool,
) -> list[Violation]:
    """Translates weights that cannot be restored (shapes differ) into the order error they mean.

    Args:
        stored: tensor name -> shape in the checkpoint's ``state_dict``.
        model: tensor name -> shape of the model about to receive them.
        model_fits_data: whether the model's dims agree with this run's data. If they do, the
            checkpoint was trained on other data (``resume-data-changed``); if not, the model was
            built before the data's dims were known (``init-before-data``).

    Returns:
        One violation naming every mismatched tensor with both shapes, or nothing.
    """
    mismatched = {
        name: (tuple(shape), tuple(model[name]))
        for name, shape in stored.items()
        if name in model and tuple(shape) != tuple(model[name])
    }
    if not mismatched:
        return []
    shapes = "; ".join(
        f"{name}: checkpoint {list(a)} vs model {list(b)}" for name, (a, b) in mismatched.items()
    )
    details = {
        "shapes": {name: {"checkpoint": list(a), "model": list(b)} for name, (a, b) in mismatched.items()}
    }
    if model_fits_data:
        return [
            Violation(
                "resume-data-changed",
                ("encode", "init_model"),
                f"the checkpoint's weights do not fit this run's data: {shapes}; it was trained on other "
                "prepared data (another vocabulary size, feature count or label set), or the model's "
                "architecture changed since",
                details=details,
            )
        ]
    return [
        Violation(
            "init-before-data",
            ("init_model", "encode"),
            f"the model cannot take the checkpoint's weights: {shapes}; it was built with other dims "
            "than the data's",
            details=details,
        )
    ]

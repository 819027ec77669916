"""The train-versus-validation detectors: leakage (validation as good as train from the start, or a
label-encoded feature fitted on validation rows) and splits that differ (validation far above train)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_order.checks.symptoms.guards import require_positive
from lightning_order.checks.symptoms.table import Diagnosis, new_diagnosis

__all__ = ["detect_label_leak", "detect_train_val_gap"]


def detect_train_val_gap(
    train_losses: Sequence[float],
    val_losses: Sequence[float],
    *,
    step: int = 0,
    leak_epochs: int = 3,
    leak_margin: float = 0.0,
    min_learning: float = 0.5,
    max_tracking: float = 1.5,
    require_shrinking_ratio: bool = True,
    overfit_ratio: float = 3.0,
    overfit_min_gap: float = 0.5,
    max_val_rise: float = 0.05,
) -> Diagnosis | None:
    """Validation loss suspiciously at or below train from the start, or far above it.

    One entry per validation run (epoch), in order; ``train_losses[i]`` is the train loss near
    that validation (the monitor uses the mean of the last steps before it, not the epoch mean,
    which lags behind a model that improves fast).

    * **leakage** (``train-val-overlap``): for each of the first ``leak_epochs`` validations the
      val loss is at most ``(1 + leak_margin)`` times the train loss, the train loss has fallen
      to at most ``min_learning`` times its first value (the model has learned enough to
      memorise: a model that learned nothing has val = train on any split), *and* the val loss
      kept pace with it: its relative fall is at least the train loss's divided by
      ``max_tracking``. On an honest split the model starts memorising train and the val loss
      falls more slowly (on the demo corpus, val fell to 65% while train fell to 16%); on rows
      it trained on, val falls as fast as train. With ``require_shrinking_ratio`` the val/train
      ratio must also fall at every one of those validations (memorised rows pull ahead of
      train, whose loss dropout keeps up): on an easy task held-out rows track train closely,
      and this is what tells them apart (demo, honest split: ratios 0.88, 0.83, 0.88; rows
      copied from train: 0.60, 0.45, 0.40). Loss curves are a weak leakage signal on easy
      tasks; ``OrderValidator``'s key-hash overlap check is the reliable one.
    * **overfitting** (``train-val-overlap``, the rule the table lists: train and validation do
      not hold the same rows' distribution, e.g. a split before cleaning; or the model simply
      memorises): the latest val loss is at least ``overfit_ratio`` times the train loss and
      above it by at least ``overfit_min_gap`` nats, *and* it is still within ``max_val_rise``
      of its best. A validation loss that climbs back from its best while train keeps falling
      is ordinary memorisation (a correct run that trains long enough does it: the lab's correct
      target-encoding runs reach 3x by step 300), not something to report; a gap that holds at
      the best validation loss says the splits differ.

    Leakage evidence (validation labels reached training) cannot tell overlapping rows from
    fitted features that learned from validation rows: the evidence lists both
    (``candidates``), the diagnosis names the listed ``train-val-overlap``, and the monitor
    narrows it with what the validator found (:func:`~lightning_order.checks.symptoms.attribute`).

    Args:
        train_losses: train loss at each validation.
        val_losses: validation loss at each validation.
        step: the step to stamp on the diagnosis.
        leak_epochs: how many first validations must all look leaky.
        leak_margin: tolerance of "at or below" (relative).
        min_learning: the train loss must be at most this share of its first value.
        max_tracking: how much slower than train the val loss may fall and still look leaky.
        require_shrinking_ratio: the val/train ratio must fall at each of the first validations.
        overfit_ratio: the val/train loss ratio that counts as far above.
        overfit_min_gap: the least absolute gap for overfitting (nats).
        max_val_rise: how far (relative) above its best the latest val loss may be and still
            count: above it, the gap is memorisation.

    Returns:
        A ``train-val-gap`` diagnosis, or ``None``.
    """
    require_positive(leak_epochs=leak_epochs, overfit_ratio=overfit_ratio)
    pairs = [
        (float(t), float(v))
        for t, v in zip(train_losses, val_losses)
        if math.isfinite(t) and math.isfinite(v)
    ]
    if not pairs:
        return None
    if len(pairs) >= leak_epochs:
        first = pairs[:leak_epochs]
        leaky = all(v <= t * (1 + leak_margin) for t, v in first)
        train_fall = first[-1][0] / pairs[0][0] if pairs[0][0] > 0 else 1.0
        val_fall = first[-1][1] / pairs[0][1] if pairs[0][1] > 0 else 1.0
        learned = train_fall <= min_learning
        tracking = val_fall <= max_tracking * train_fall
        ratios = [v / t if t > 0 else math.inf for t, v in first]
        shrinking = all(b < a for a, b in itertools.pairwise(ratios)) or not require_shrinking_ratio
        if leaky and learned and tracking and shrinking:
            return new_diagnosis(
                "train-val-gap",
                step,
                f"the validation loss was at or below the train loss in each of the first {leak_epochs} "
                f"epochs ({', '.join(f'{v:.3f}<={t:.3f}' for t, v in first)}) while the train loss fell "
                f"to {first[-1][0] / pairs[0][0]:.0%} of its start: validation rows were likely trained on",
                {
                    "kind": "leakage",
                    "train": [t for t, _ in first],
                    "val": [v for _, v in first],
                    "leak_epochs": leak_epochs,
                    "leak_margin": leak_margin,
                    "train_fall": train_fall,
                    "val_fall": val_fall,
                    "min_learning": min_learning,
                    "max_tracking": max_tracking,
                    "ratios": ratios,
                    "candidates": ["train-val-overlap", "fit-before-split"],
                    "statistic": first[-1][1] / first[-1][0] if first[-1][0] > 0 else None,
                    "baseline": 1.0 + leak_margin,
                    "distance": (1.0 + leak_margin)
                    - (first[-1][1] / first[-1][0] if first[-1][0] > 0 else 1.0),
                },
            )
    train, val = pairs[-1]
    best_val = min(v for _, v in pairs)
    memorising = val > best_val * (1.0 + max_val_rise)
    if train > 0 and val >= overfit_ratio * train and val - train >= overfit_min_gap and not memorising:
        return new_diagnosis(
            "train-val-gap",
            step,
            f"the validation loss {val:.3f} is {val / train:.1f}x the train loss {train:.3f}: the "
            "model memorises train, or train and validation do not hold the same distribution",
            {
                "kind": "overfitting",
                "train": train,
                "val": val,
                "ratio": val / train,
                "overfit_ratio": overfit_ratio,
                "overfit_min_gap": overfit_min_gap,
                "best_val": best_val,
                "statistic": val / train,
                "baseline": overfit_ratio,
                "distance": val - train,
            },
        )
    return None


def detect_label_leak(
    columns: Sequence[Mapping[str, Any]],
    *,
    train_loss: float | None,
    val_loss: float | None,
    step: int = 0,
    min_ratio: float = 3.0,
) -> Diagnosis | None:
    """Validation read through label-encoded features fitted on validation rows: optimistic metrics.

    The loss curves cannot show this leak: a target encoding carries each train row's own label
    as much as each validation row's, so the val/train ratio looks the same with a leaky and a
    sound fit (the lab: 0.84-1.18 in both). The evidence is the data's:
    :func:`~lightning_order.checks.label_encoding.check_label_encoded_features` (run by
    ``OrderValidator``, or by the monitor when there is none) found columns that match their
    categories' mean label over train + validation rows ``ratio`` times better than over the
    train rows. This detector turns it into the symptom a user sees at a validation: its loss
    is read through those columns.

    Args:
        columns: the check's per-column evidence (``name``, ``ratio``, ``fit_all``, ``fit_train``, ...).
        train_loss: the train loss near this validation (for the message).
        val_loss: this validation's loss.
        step: the step to stamp on the diagnosis.
        min_ratio: the least ratio that counts.

    Returns:
        A ``train-val-gap`` diagnosis (``kind`` ``leakage``, ``trigger`` ``label-encoded-feature``) or ``None``.
    """
    leaked = [c for c in columns if float(c.get("ratio", 0.0)) >= min_ratio]
    if not leaked or val_loss is None or not math.isfinite(val_loss):
        return None
    worst = max(leaked, key=lambda c: float(c["ratio"]))
    ratio = float(worst["ratio"])
    seen = f" (train {train_loss:.3f})" if train_loss is not None and math.isfinite(train_loss) else ""
    return new_diagnosis(
        "train-val-gap",
        step,
        f"the validation loss {val_loss:.3f}{seen} is read through {len(leaked)} label-encoded "
        f"column(s) fitted on validation rows ({', '.join(str(c['name']) for c in leaked)}): "
        f"{worst['name']} matches its categories' mean label over train + validation rows "
        f"{ratio:.1f}x better than over the train rows, so validation metrics are optimistic",
        {
            "kind": "leakage",
            "trigger": "label-encoded-feature",
            "columns": [str(c["name"]) for c in leaked],
            "train": train_loss,
            "val": val_loss,
            "candidates": ["fit-before-split"],
            "statistic": ratio,
            "baseline": min_ratio,
            "distance": ratio - min_ratio,
        },
        rule="fit-before-split",
    )

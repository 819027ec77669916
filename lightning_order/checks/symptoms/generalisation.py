"""The train-versus-validation detectors: leakage (validation easier than train from the start, or a
label-encoded feature fitted on validation rows) and splits that differ (validation far above train).

Like with like: a validation loss is the model's loss *at the validation*, so the train loss it is
compared with is the train loss at that step too (:func:`current_train_loss`: the trend of the
last steps' losses, carried to the validation, with its standard error from their spread around
it), not a mean over steps whose model was worse. A mean of the last steps lags behind a model
that still improves fast, and that lag alone made a correct run's validation loss sit below its
"train loss" (issue 27). The trade-off, measured in ``docs/order-error-lab.md``: rows copied
from train are still far easier than the train rows only when the model memorises faster than
dropout and noise hide it, so the curves alone rarely show them; the validator's key-hash
overlap check is the reliable evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_order.checks.symptoms.guards import finite_values, require_positive
from lightning_order.checks.symptoms.table import Diagnosis, new_diagnosis

__all__ = ["current_train_loss", "detect_label_leak", "detect_train_val_gap"]


def current_train_loss(losses: Sequence[float]) -> tuple[float, float] | None:
    """The train loss one step after the last of ``losses``, and the standard error of its logarithm.

    A least-squares line through the losses' logarithms (a loss that falls fast falls roughly
    geometrically), carried one step past the last loss: the model a validation right after
    these steps evaluates has made that step. The standard error comes from the losses' own
    spread around the line (batch to batch), so a short or noisy window says how little it
    knows. Losses that are not all positive are fitted as they are (the error then relative to
    the estimate); non-finite ones are ignored.

    Args:
        losses: per-step train losses, oldest first, from one stretch of training (no epoch
            boundary inside, where the loss jumps as rows come round again).

    Returns:
        ``(loss, log_standard_error)``; the error is ``inf`` with fewer than 3 losses; ``None``
        without any finite loss.
    """
    values = finite_values(losses)
    n = len(values)
    if n == 0:
        return None
    positive = all(v > 0 for v in values)
    ys = [math.log(v) for v in values] if positive else values
    if n < 3:
        mean = sum(ys) / n
        return (math.exp(mean) if positive else mean), math.inf
    x_mean = (n - 1) / 2
    y_mean = sum(ys) / n
    sxx = sum((i - x_mean) ** 2 for i in range(n))
    slope = sum((i - x_mean) * (y - y_mean) for i, y in enumerate(ys)) / sxx
    residual = sum((y - y_mean - slope * (i - x_mean)) ** 2 for i, y in enumerate(ys))
    spread = math.sqrt(residual / (n - 2))
    at = n  # one step past the last loss
    estimate = y_mean + slope * (at - x_mean)
    error = spread * math.sqrt(1 / n + (at - x_mean) ** 2 / sxx)
    if positive:
        return math.exp(estimate), error
    return estimate, (error / abs(estimate) if estimate else math.inf)


def detect_train_val_gap(
    train_losses: Sequence[float],
    val_losses: Sequence[float],
    *,
    step: int = 0,
    leak_epochs: int = 3,
    leak_margin: float = -0.1,
    min_learning: float = 0.5,
    max_tracking: float = 1.5,
    require_shrinking_ratio: bool = True,
    overfit_ratio: float = 3.0,
    overfit_min_gap: float = 0.5,
    max_val_rise: float = 0.05,
    train_spread: Sequence[float | None] | None = None,
    leak_z: float = 2.0,
) -> Diagnosis | None:
    """Validation loss below the train loss at the same step from the start, or far above it.

    One entry per validation run, in order; ``train_losses[i]`` is the train loss *at* that
    validation (the monitor carries the trend of the steps before it to the validation's step,
    :func:`current_train_loss`), and ``train_spread[i]`` the standard error of its logarithm.

    * **leakage** (validation rows easier than the rows trained on): for each of the first
      ``leak_epochs`` validations the val loss is at most ``(1 + leak_margin)`` times the train
      loss (default: at least 10 % below it; a correct model with dropout or augmentation scores
      its validation rows in evaluation mode, a few per cent below its train-mode loss) and, when
      ``train_spread`` is given, below it by more than ``leak_z`` standard errors of the train
      estimate (the run's own batch-to-batch spread); the train loss has fallen to at most
      ``min_learning`` times its first value (the model has learned enough to memorise: a model
      that learned nothing has val = train on any split); the val loss kept pace with it (its
      relative fall at least the train loss's divided by ``max_tracking``); and, with
      ``require_shrinking_ratio``, the val/train ratio fell from the first validation to the
      second and never rose again beyond the train estimates' noise (memorised rows pull further
      ahead of train; a constant offset, dropout's, does not; held-out rows fall behind as the
      model memorises).
      Validation rows that were trained on score like train rows; they score *better* than
      them when they were trained on more often (duplicated rows on both sides) or when the
      model memorises faster than dropout hides. A validation loss equal to the train loss is
      what leaked rows and a model that generalises perfectly both show: no verdict there.
    * **overfitting** (the rule the table lists: train and validation do not hold the same
      rows' distribution, e.g. a split before cleaning; or the model simply memorises): the
      latest val loss is at least ``overfit_ratio`` times the train loss and above it by at least
      ``overfit_min_gap`` nats, *and* it is still within ``max_val_rise`` of its best. A
      validation loss that climbs back from its best while train keeps falling is ordinary
      memorisation (a correct run that trains long enough does it), not something to report; a
      gap that holds at the best validation loss says the splits differ.

    Leakage evidence (validation labels reached training) cannot tell overlapping rows from
    fitted features that learned from validation rows: the evidence lists both
    (``candidates``), the diagnosis names the listed ``train-val-overlap``, and the monitor
    narrows it with the run's evidence (:func:`~lightning_order.checks.symptoms.attribute`),
    which may rule both out.

    Args:
        train_losses: train loss at each validation.
        val_losses: validation loss at each validation.
        step: the step to stamp on the diagnosis.
        leak_epochs: how many first validations must all look leaky.
        leak_margin: how far (relative) the val loss may lie above the train loss and still
            count; negative: how far below it must lie.
        min_learning: the train loss must be at most this share of its first value.
        max_tracking: how much slower than train the val loss may fall and still look leaky.
        require_shrinking_ratio: the val/train ratio must fall over the first validations (from
            the first to the second, then never rise beyond the noise of the train estimates).
        overfit_ratio: the val/train loss ratio that counts as far above.
        overfit_min_gap: the least absolute gap for overfitting (nats).
        max_val_rise: how far (relative) above its best the latest val loss may be and still
            count: above it, the gap is memorisation.
        train_spread: per validation, the standard error of the train estimate's logarithm
            (``None`` entries or argument: not known, no noise test).
        leak_z: how many standard errors of the train estimate the val loss must lie below it.

    Returns:
        A ``train-val-gap`` diagnosis, or ``None``.
    """
    require_positive(leak_epochs=leak_epochs, overfit_ratio=overfit_ratio)
    if not leak_margin > -1:
        raise ValueError(f"leak_margin must be > -1, got {leak_margin!r}")
    spreads = list(train_spread) if train_spread is not None else []
    spreads += [None] * (len(train_losses) - len(spreads))
    triples = [
        (float(t), float(v), s)
        for t, v, s in zip(train_losses, val_losses, spreads)
        if math.isfinite(t) and math.isfinite(v)
    ]
    pairs = [(t, v) for t, v, _ in triples]
    if not pairs:
        return None
    if len(pairs) >= leak_epochs:
        first = triples[:leak_epochs]
        lead = [_lead(t, v) for t, v, _ in first]  # ln(train / val): how far val lies below train
        below = all(lead_i >= -math.log1p(leak_margin) - 1e-12 for lead_i in lead)
        clear = all(s is None or lead_i > leak_z * float(s) for lead_i, (_, _, s) in zip(lead, first))
        train_fall = first[-1][0] / pairs[0][0] if pairs[0][0] > 0 else 1.0
        val_fall = first[-1][1] / pairs[0][1] if pairs[0][1] > 0 else 1.0
        learned = train_fall <= min_learning
        tracking = val_fall <= max_tracking * train_fall
        ratios = [v / t if t > 0 else math.inf for t, v, _ in first]
        shrinking = _pulls_ahead(ratios, [s for _, _, s in first], leak_z) or not require_shrinking_ratio
        if below and clear and learned and tracking and shrinking:
            zs = [lead_i / float(s) for lead_i, (_, _, s) in zip(lead, first) if s is not None and s > 0]
            return new_diagnosis(
                "train-val-gap",
                step,
                f"the validation loss was below the train loss at the same step in each of the first "
                f"{leak_epochs} validations ({', '.join(f'{v:.3f} vs {t:.3f}' for t, v, _ in first)}; "
                f"ratios {', '.join(f'{r:.2f}' for r in ratios)}, falling) while the train loss fell to "
                f"{train_fall:.0%} of its start: validation rows are easier than the rows trained on",
                {
                    "kind": "leakage",
                    "train": [t for t, _, _ in first],
                    "val": [v for _, v, _ in first],
                    "train_spread": [s for _, _, s in first],
                    "leak_epochs": leak_epochs,
                    "leak_margin": leak_margin,
                    "leak_z": leak_z,
                    "train_fall": train_fall,
                    "val_fall": val_fall,
                    "min_learning": min_learning,
                    "max_tracking": max_tracking,
                    "ratios": ratios,
                    "candidates": ["train-val-overlap", "fit-before-split"],
                    "statistic": ratios[-1],
                    "baseline": 1.0 + leak_margin,
                    "distance": (1.0 + leak_margin) - ratios[-1],
                    "z": min(zs) if zs else None,
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


def _pulls_ahead(ratios: Sequence[float], spreads: Sequence[float | None], z: float) -> bool:
    """The val/train ratio falls from the first validation to the second, and never rises again by
    more than ``z`` standard errors of the two train estimates (exactly, where they are unknown)."""
    if len(ratios) < 2 or not ratios[1] < ratios[0]:
        return False
    for i in range(1, len(ratios) - 1):
        a, b = ratios[i], ratios[i + 1]
        noise = math.hypot(float(spreads[i] or 0.0), float(spreads[i + 1] or 0.0))
        if noise == 0.0:
            if not b < a:
                return False
        elif not (a > 0 and b > 0 and math.log(b / a) < z * noise):
            return False
    return True


def _lead(train: float, val: float) -> float:
    """``ln(train / val)``: how far (in log units) the val loss lies below the train loss."""
    if train > 0 and val > 0:
        return math.log(train / val)
    return math.inf if val < train else -math.inf


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

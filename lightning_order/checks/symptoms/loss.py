"""Detectors on one rank's loss curve: early oscillation and a loss that does not fall (or unknown tokens).

Each compares the run with its own baseline: the oscillation detector with the larger of the
window's median loss and the run's starting loss, the stall detector with the run's first ``warmup_steps`` losses, the unknown-token trigger
with the unknown rate the vocabulary leaves on its own train text.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from lightning_order.checks.symptoms.guards import finite_values, require_positive
from lightning_order.checks.symptoms.table import Diagnosis, new_diagnosis

__all__ = ["detect_early_oscillation", "detect_plateau"]


def detect_early_oscillation(
    losses: Sequence[float],
    *,
    step: int | None = None,
    warmup_steps: int = 5,
    window: int = 40,
    large_delta: float = 0.5,
    min_large: int = 6,
    min_flip_ratio: float = 0.5,
    min_spread: float = 1.0,
    max_growth: float = 2.0,
) -> Diagnosis | None:
    """The loss swings hard in the first steps.

    Looks at the losses of steps ``warmup_steps .. warmup_steps + window`` (the first ones after
    the very first, naturally steep, steps). A *large* delta is a step-to-step change bigger than
    ``large_delta`` times the *scale*: the larger of the window's median loss and the run's
    starting loss (the mean of its first ``warmup_steps`` losses). A loss that converges towards
    0 (Lightning's ``BoringModel``) swings a lot relative to its own tiny median, but little
    relative to where it started. The run oscillates when all three hold:

    * at least ``min_large`` large deltas (a correct run has a few while it drops fast),
    * at least ``min_flip_ratio`` of consecutive large deltas flip sign (up, down, up: a correct
      run's large deltas point down),
    * the window's relative spread ``(max - min) / scale`` is at least ``min_spread``,

    and the loss is not diverging: a window whose median grew above ``max_growth`` times the
    starting loss is a run blowing up (a step size far too large, as Lightning's ``BoringModel``
    with SGD at 0.1 does), which the ``plateau`` stall reports as "not learning" once its window
    is full; per-shard statistics make a loss swing, not explode.

    Args:
        losses: the per-step train losses of one rank, from step 0 on.
        step: the step to stamp on the diagnosis (default: the last loss's index).
        warmup_steps: steps skipped at the start.
        window: how many steps after the warm-up are judged; fewer than ``window // 2`` judged
            losses give no verdict.
        large_delta: the size of a large delta, relative to the scale.
        min_large: the least number of large deltas.
        min_flip_ratio: the least share of sign flips between consecutive large deltas.
        min_spread: the least relative spread of the window.
        max_growth: the largest growth of the window's median over the starting loss.

    The detector names no order error (``suspected_rule`` is ``None``): one rank's loss curve
    cannot tell per-shard statistics from a learning rate that is too high. The monitor names
    ``shard-before-normalize`` only when the ranks or the validator's ledger point to it
    (:func:`~lightning_order.checks.symptoms.attribute`).

    Returns:
        A ``early-oscillation`` diagnosis, or ``None``.
    """
    require_positive(window=window, large_delta=large_delta, min_spread=min_spread)
    judged = finite_values(losses[warmup_steps : warmup_steps + window])
    if len(judged) < max(window // 2, 3):
        return None
    median = statistics.median(judged)
    start = finite_values(losses[:warmup_steps])
    start_level = statistics.fmean(start) if start else 0.0
    scale = max(median, start_level)
    if scale <= 0 or (start_level > 0 and median > max_growth * start_level):
        return None
    deltas = [b - a for a, b in itertools.pairwise(judged)]
    large = [d for d in deltas if abs(d) > large_delta * scale]
    flips = sum(1 for a, b in itertools.pairwise(large) if (a > 0) != (b > 0))
    flip_ratio = flips / (len(large) - 1) if len(large) > 1 else 0.0
    spread = (max(judged) - min(judged)) / scale
    if len(large) < min_large or flip_ratio < min_flip_ratio or spread < min_spread:
        return None
    return new_diagnosis(
        "early-oscillation",
        step if step is not None else len(losses) - 1,
        f"the loss swung {len(large)} times by more than {large_delta:.0%} of its scale {scale:.3g} in steps "
        f"{warmup_steps}-{warmup_steps + len(judged) - 1}, flipping direction {flip_ratio:.0%} of the time "
        f"(spread {spread:.2f}x the scale)",
        {
            "large_deltas": len(large),
            "flip_ratio": flip_ratio,
            "relative_spread": spread,
            "median_loss": median,
            "scale": scale,
            "first_step": warmup_steps,
            "steps_judged": len(judged),
            "large_delta": large_delta,
            "min_large": min_large,
            "min_flip_ratio": min_flip_ratio,
            "min_spread": min_spread,
            "statistic": len(large),
            "baseline": min_large,
            "distance": len(large) - min_large,
        },
        rule=None,  # one rank's curve cannot tell per-shard statistics from a high learning rate
    )


# -- plateau ----------------------------------------------------------------------------------
def detect_plateau(
    losses: Sequence[float],
    *,
    step: int | None = None,
    unk_rate: float | None = None,
    unk_baseline: float | None = 0.0,
    warmup_steps: int = 20,
    window: int = 120,
    min_improvement: float = 0.02,
    max_progress: float = 0.25,
    max_unk_rate: float = 0.002,
    max_growth: float = 2.0,
) -> Diagnosis | None:
    """The loss does not improve over a long window after warm-up, or many tokens are unknown.

    Two triggers:

    * **stall** (not learning; no order error named): with at least ``warmup_steps + window``
      losses, the mean of the last ``window // 2`` losses is less than ``min_improvement``
      (relative) below the mean of the ``window // 2`` before them, *and* the run has made little
      progress overall: the recent mean is still above ``1 - max_progress`` times the mean of the
      first ``warmup_steps`` losses (the run's own baseline). A correct run that converged stalls
      too, but low, so it is not flagged; a correct run may also pause on an early plateau for
      about 50 steps (the hand-written pipeline of the tests, seed 4: 1.27 from step 40 to 90,
      then 1.02 by step 120), hence a window of 120. A loss that does not fall has ordinary causes (labels
      that carry no signal, a learning rate, a model) that the curve cannot tell from an order
      error, so the diagnosis says what it saw and names no rule. A recent mean above
      ``max_growth`` times the start is a stall whatever the last window's trend: a diverging
      loss swings so wildly (Lightning's ``BoringModel`` with SGD at 0.1: from 20 to 10⁴) that
      one half-window can look better than the one before it.
    * **unknown tokens** (``vocab-before-clean``): after the warm-up, the share of non-padding
      input tokens that are the unknown token exceeds ``unk_baseline`` (the rate the vocabulary
      leaves on its own train text) by more than ``max_unk_rate``. A subword vocabulary
      (WordPiece, BPE) covers the alphabet of the text it was trained on, so its baseline is 0
      on that text, and unknown tokens in the train batches mean the model sees other text than
      the vocabulary learned from (0.0% on the demo corpus at every seed; 0.33% with the
      vocabulary built before cleaning). A capped word-level vocabulary leaves unknown tokens on
      its own train text by design: with no baseline for it (``unk_baseline=None``) the trigger
      stays silent, since nothing then separates a cap from an order error.

    Args:
        losses: the per-step train losses of one rank, from step 0 on (a bounded window of the
            latest ones is fine once ``warmup_steps`` have been seen: pass the first ones' mean
            through the first ``warmup_steps`` entries).
        step: the step to stamp on the diagnosis (default: the last loss's index).
        unk_rate: the recent unknown-token share of input tokens, when known.
        unk_baseline: the unknown-token share the vocabulary leaves on its own train text
            (``None``: unknown, and the unknown-token trigger is off).
        warmup_steps: the steps whose mean is the starting level; no verdict before them.
        window: the length of the stall window.
        min_improvement: the least relative improvement across the window.
        max_progress: the relative progress from the start below which a stall counts.
        max_unk_rate: the largest unknown-token share a correct vocabulary leaves.
        max_growth: the recent mean over the start above which the loss is diverging.

    Returns:
        A ``plateau`` diagnosis, or ``None``.
    """
    require_positive(window=window, warmup_steps=warmup_steps, max_unk_rate=max_unk_rate)
    values = finite_values(losses)
    if len(values) < warmup_steps:
        return None
    stamp = step if step is not None else len(losses) - 1
    start = statistics.fmean(values[:warmup_steps])
    if unk_rate is not None and unk_baseline is not None and unk_rate - unk_baseline > max_unk_rate:
        return new_diagnosis(
            "plateau",
            stamp,
            f"{unk_rate:.2%} of the input tokens are unknown where the vocabulary leaves "
            f"{unk_baseline:.2%} on its own train text (+{unk_rate - unk_baseline:.2%}, over "
            f"{max_unk_rate:.2%}): the vocabulary was not built on the text the model sees",
            {
                "trigger": "unk-rate",
                "unk_rate": unk_rate,
                "unk_baseline": unk_baseline,
                "max_unk_rate": max_unk_rate,
                "start_loss": start,
                "statistic": unk_rate,
                "baseline": unk_baseline,
                "distance": unk_rate - unk_baseline,
            },
        )
    half = window // 2
    if len(values) < warmup_steps + 2 * half or start <= 0:
        return None
    older = statistics.fmean(values[-2 * half : -half])
    recent = statistics.fmean(values[-half:])
    improvement = (older - recent) / older if older > 0 else 0.0
    progress = (start - recent) / start
    diverging = recent > max_growth * start
    if not diverging and (improvement >= min_improvement or progress >= max_progress):
        return None
    unk_text = f"; unknown-token rate {unk_rate:.1%}" if unk_rate is not None else ""
    seen = (
        f"the loss of the last {half} steps is {recent / start:.3g}x its start (diverging)"
        if diverging
        else f"the loss improved {improvement:.1%} over the last {2 * half} steps and only "
        f"{progress:.0%} since the start"
    )
    return new_diagnosis(
        "plateau",
        stamp,
        f"not learning: {seen} ({start:.3f} -> {recent:.3f}){unk_text}",
        {
            "trigger": "stall",
            "start_loss": start,
            "older_mean": older,
            "recent_mean": recent,
            "improvement": improvement,
            "progress": progress,
            "diverging": diverging,
            "unk_rate": unk_rate,
            "window": 2 * half,
            "min_improvement": min_improvement,
            "max_progress": max_progress,
            "statistic": recent,
            "baseline": start,
            "distance": progress,
        },
        rule=None,
    )

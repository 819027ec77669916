"""Pure detectors that read order errors off training signals (the troubleshooting guide, as code).

Some order errors only show while training, and users also run pipelines we did not build. Each
detector here takes plain numbers (losses, per-rank means, timings, memory readings) and returns a
:class:`Diagnosis` naming the symptom, the order error it most likely comes from (a rule code of
:data:`lightning_order.order.RULES`) and the numbers behind the verdict, or ``None``.

Trade-off: every detector answers "is this far outside what a correct run shows?", so each has a
threshold and a warm-up, chosen so that correct runs give *no* diagnosis (a false alarm costs a
user's trust more than a late one). The defaults were calibrated on correct demo runs (see
``docs/troubleshooting.md``); every threshold is an argument.

:class:`~lightning_order.callbacks.SymptomMonitor` gathers the numbers during ``fit`` and calls
these functions; nothing here touches a Trainer, a GPU or a process group.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_order.order import RULES

__all__ = [
    "SYMPTOMS",
    "Diagnosis",
    "SymptomInfo",
    "detect_data_starvation",
    "detect_early_oscillation",
    "detect_memory_swing",
    "detect_plateau",
    "detect_rank_divergence",
    "detect_train_val_gap",
]


@dataclass(frozen=True)
class SymptomInfo:
    """One row of the troubleshooting table.

    Attributes:
        suspected_rule: the rule code of the order error the symptom most often comes from.
        signal: what the detector measures.
        explanation: why that order error produces the symptom.
        fix: what to do.
    """

    suspected_rule: str
    signal: str
    explanation: str
    fix: str


#: The troubleshooting table: symptom code -> what it points to. Stable codes, like rule codes.
SYMPTOMS: dict[str, SymptomInfo] = {
    "early-oscillation": SymptomInfo(
        "shard-before-normalize",
        "the loss swings hard in the first steps: large step-to-step changes that flip sign",
        "each rank normalised its shard with its own statistics, so the same raw value means "
        "different things on different ranks and the averaged gradients pull against each other",
        "fit the statistics once on the whole train split in prepare_data, then shard in setup; "
        "then lightning_order.recover() (data path)",
    ),
    "plateau": SymptomInfo(
        "vocab-before-clean",
        "the loss stops improving over a long window after warm-up while still high, or many "
        "input tokens are unknown",
        "a vocabulary built before cleaning spends its slots on markup and '##' pieces, so the "
        "cleaned text the model sees maps to unknown or meaningless tokens",
        "clean -> split -> build_vocab on the cleaned train text; then lightning_order.recover() "
        "remaps the embedding rows by token",
    ),
    "rank-divergence": SymptomInfo(
        "rank-mismatch",
        "per-rank mean losses differ by far more than their own step-to-step noise",
        "the ranks do not train on the same distribution: sharded before the statistics were "
        "fitted, or each rank prepared its own data",
        "prepare once on rank 0 (shared cache), shuffle before sharding, shard in setup",
    ),
    "train-val-gap": SymptomInfo(
        "train-val-overlap",
        "validation loss at or below the train loss from the start (leakage), or far above it (overfitting)",
        "validation rows that were also trained on (split before cleaning or deduplication, "
        "statistics fitted before the split) score as well as train; a far-too-large gap means "
        "the split does not hold the same distribution or the model memorises",
        "split by a hash of the cleaned key after cleaning, fit statistics on train only; "
        "OrderValidator names the step",
    ),
    "data-starvation": SymptomInfo(
        "out-of-order",
        "most of each step's wall time is spent waiting for the next batch",
        "preprocessing (tokenisation, feature maths) runs inside the training loop, in "
        "__getitem__ or collate, instead of once in prepare_data",
        "move the work into OrderedDataModule's steps (cached), or raise num_workers",
    ),
    "memory-swing": SymptomInfo(
        "init-before-data",
        "on CUDA, allocated memory swings widely between steps",
        "buffers created or moved after the model was placed (data loaded after model init, "
        "lazy layers, tensors re-created per step) are allocated and freed every step",
        "build the data first, then the model from the data's dims; keep data on the host "
        "until the batch transfer",
    ),
}

for _code, _info in SYMPTOMS.items():  # the table may only name real rule codes
    if _info.suspected_rule not in RULES:  # pragma: no cover - guarded at import
        raise ValueError(f"symptom {_code!r} names unknown rule {_info.suspected_rule!r}")


@dataclass(frozen=True)
class Diagnosis:
    """A symptom seen in training, with the order error it points to.

    Attributes:
        symptom: a code of :data:`SYMPTOMS` (``early-oscillation``, ``plateau``, ...).
        step: the global step (or, for epoch-level symptoms, the step at that validation).
        suspected_rule: the rule code of the likely order error.
        evidence: the numbers behind the verdict (thresholds included), plain JSON data.
        message: one readable line.
    """

    symptom: str
    step: int
    suspected_rule: str
    evidence: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    message: str = ""

    def __post_init__(self) -> None:
        if self.symptom not in SYMPTOMS:
            raise ValueError(f"unknown symptom {self.symptom!r}; expected one of {', '.join(SYMPTOMS)}")
        if self.suspected_rule not in RULES:
            raise ValueError(f"unknown rule code {self.suspected_rule!r}; expected one of {', '.join(RULES)}")

    @property
    def fix(self) -> str:
        """What to do, from :data:`SYMPTOMS`."""
        return SYMPTOMS[self.symptom].fix

    def describe(self) -> str:
        """The diagnosis as a few readable lines."""
        info = SYMPTOMS[self.symptom]
        return (
            f"[{self.symptom}] at step {self.step}: {self.message}\n"
            f"     likely order error: {self.suspected_rule} ({RULES[self.suspected_rule].title})\n"
            f"     why: {info.explanation}\n"
            f"     fix: {info.fix}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for checkpoints, logs and JSON)."""
        return {
            "symptom": self.symptom,
            "step": int(self.step),
            "suspected_rule": self.suspected_rule,
            "evidence": dict(self.evidence),
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """Rebuilds a diagnosis from :meth:`to_dict` output."""
        return cls(
            symptom=data["symptom"],
            step=int(data["step"]),
            suspected_rule=data["suspected_rule"],
            evidence=dict(data.get("evidence", {})),
            message=data.get("message", ""),
        )


def _diagnosis(
    symptom: str, step: int, message: str, evidence: dict[str, Any], rule: str | None = None
) -> Diagnosis:
    rounded = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in evidence.items()}
    return Diagnosis(symptom, int(step), rule or SYMPTOMS[symptom].suspected_rule, rounded, message)


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if math.isfinite(float(v))]


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


# -- early-oscillation ------------------------------------------------------------------------
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
) -> Diagnosis | None:
    """The loss swings hard in the first steps.

    Looks at the losses of steps ``warmup_steps .. warmup_steps + window`` (the first ones after
    the very first, naturally steep, steps). A *large* delta is a step-to-step change bigger than
    ``large_delta`` times the window's median loss. The run oscillates when all three hold:

    * at least ``min_large`` large deltas (a correct run has a few while it drops fast),
    * at least ``min_flip_ratio`` of consecutive large deltas flip sign (up, down, up: a correct
      run's large deltas point down),
    * the window's relative spread ``(max - min) / median`` is at least ``min_spread``.

    Args:
        losses: the per-step train losses of one rank, from step 0 on.
        step: the step to stamp on the diagnosis (default: the last loss's index).
        warmup_steps: steps skipped at the start.
        window: how many steps after the warm-up are judged; fewer than ``window // 2`` judged
            losses give no verdict.
        large_delta: the size of a large delta, relative to the window's median loss.
        min_large: the least number of large deltas.
        min_flip_ratio: the least share of sign flips between consecutive large deltas.
        min_spread: the least relative spread of the window.

    Returns:
        A ``early-oscillation`` diagnosis, or ``None``.
    """
    _check_positive(window=window, large_delta=large_delta, min_spread=min_spread)
    judged = _finite(losses[warmup_steps : warmup_steps + window])
    if len(judged) < max(window // 2, 3):
        return None
    median = statistics.median(judged)
    if median <= 0:
        return None
    deltas = [b - a for a, b in itertools.pairwise(judged)]
    large = [d for d in deltas if abs(d) > large_delta * median]
    flips = sum(1 for a, b in itertools.pairwise(large) if (a > 0) != (b > 0))
    flip_ratio = flips / (len(large) - 1) if len(large) > 1 else 0.0
    spread = (max(judged) - min(judged)) / median
    if len(large) < min_large or flip_ratio < min_flip_ratio or spread < min_spread:
        return None
    return _diagnosis(
        "early-oscillation",
        step if step is not None else len(losses) - 1,
        f"the loss swung {len(large)} times by more than {large_delta:.0%} of its median in steps "
        f"{warmup_steps}-{warmup_steps + len(judged) - 1}, flipping direction {flip_ratio:.0%} of the time "
        f"(spread {spread:.2f}x the median)",
        {
            "large_deltas": len(large),
            "flip_ratio": flip_ratio,
            "relative_spread": spread,
            "median_loss": median,
            "first_step": warmup_steps,
            "steps_judged": len(judged),
            "large_delta": large_delta,
            "min_large": min_large,
            "min_flip_ratio": min_flip_ratio,
            "min_spread": min_spread,
        },
    )


# -- plateau ----------------------------------------------------------------------------------
def detect_plateau(
    losses: Sequence[float],
    *,
    step: int | None = None,
    unk_rate: float | None = None,
    warmup_steps: int = 20,
    window: int = 60,
    min_improvement: float = 0.02,
    max_progress: float = 0.25,
    max_unk_rate: float = 0.002,
) -> Diagnosis | None:
    """The loss does not improve over a long window after warm-up, or many tokens are unknown.

    Two triggers, both pointing to ``vocab-before-clean``:

    * **stall**: with at least ``warmup_steps + window`` losses, the mean of the last
      ``window // 2`` losses is less than ``min_improvement`` (relative) below the mean of the
      ``window // 2`` before them, *and* the run has made little progress overall: the recent
      mean is still above ``1 - max_progress`` times the mean of the first ``warmup_steps``
      losses. A correct run that converged stalls too, but low, so it is not flagged.
    * **unknown tokens**: after the warm-up, the share of non-padding input tokens that are the
      unknown token exceeds ``max_unk_rate``. A vocabulary built on the cleaned train text leaves
      none on its own train batches (0.0% on the demo corpus at every seed we ran).

    Args:
        losses: the per-step train losses of one rank, from step 0 on (a bounded window of the
            latest ones is fine once ``warmup_steps`` have been seen: pass the first ones' mean
            through the first ``warmup_steps`` entries).
        step: the step to stamp on the diagnosis (default: the last loss's index).
        unk_rate: the recent unknown-token share of input tokens, when known.
        warmup_steps: the steps whose mean is the starting level; no verdict before them.
        window: the length of the stall window.
        min_improvement: the least relative improvement across the window.
        max_progress: the relative progress from the start below which a stall counts.
        max_unk_rate: the largest unknown-token share a correct vocabulary leaves.

    Returns:
        A ``plateau`` diagnosis, or ``None``.
    """
    _check_positive(window=window, warmup_steps=warmup_steps, max_unk_rate=max_unk_rate)
    values = _finite(losses)
    if len(values) < warmup_steps:
        return None
    stamp = step if step is not None else len(losses) - 1
    start = statistics.fmean(values[:warmup_steps])
    if unk_rate is not None and unk_rate > max_unk_rate:
        return _diagnosis(
            "plateau",
            stamp,
            f"{unk_rate:.2%} of the input tokens are unknown (a vocabulary built on cleaned train "
            f"text leaves under {max_unk_rate:.2%}): the vocabulary does not fit the text",
            {"trigger": "unk-rate", "unk_rate": unk_rate, "max_unk_rate": max_unk_rate, "start_loss": start},
        )
    half = window // 2
    if len(values) < warmup_steps + 2 * half or start <= 0:
        return None
    older = statistics.fmean(values[-2 * half : -half])
    recent = statistics.fmean(values[-half:])
    improvement = (older - recent) / older if older > 0 else 0.0
    progress = (start - recent) / start
    if improvement >= min_improvement or progress >= max_progress:
        return None
    unk_text = f"; unknown-token rate {unk_rate:.1%}" if unk_rate is not None else ""
    return _diagnosis(
        "plateau",
        stamp,
        f"the loss improved {improvement:.1%} over the last {2 * half} steps and only {progress:.0%} "
        f"since the start ({start:.3f} -> {recent:.3f}){unk_text}",
        {
            "trigger": "stall",
            "start_loss": start,
            "older_mean": older,
            "recent_mean": recent,
            "improvement": improvement,
            "progress": progress,
            "unk_rate": unk_rate,
            "window": 2 * half,
            "min_improvement": min_improvement,
            "max_progress": max_progress,
        },
    )


# -- rank-divergence --------------------------------------------------------------------------
def detect_rank_divergence(
    per_rank_losses: Sequence[Sequence[float]] | Sequence[Mapping[str, float]],
    *,
    step: int = 0,
    z: float = 5.0,
    min_relative: float = 0.15,
) -> Diagnosis | None:
    """Per-rank losses differ beyond their own noise.

    With one loss per rank per step (the same steps on every rank, as the monitor all-gathers
    them), the test is *paired*: the ranks with the highest and lowest mean loss are compared
    step by step, ``d_t = loss_hi(t) - loss_lo(t)``, so the trend all ranks share (the loss
    falling) cancels and only the difference between ranks is left. They diverge when
    ``mean(d) / (std(d) / sqrt(n))`` exceeds ``z`` *and* ``mean(d)`` exceeds ``min_relative`` of the
    mean loss (a tiny, very stable difference is no order error). Summaries
    ``{"mean", "std", "count"}`` instead of losses give an unpaired test on the pooled standard
    error ``sqrt(se_a**2 + se_b**2)``. Ranks that draw shards of one distribution stay within a
    few standard errors.

    Args:
        per_rank_losses: one entry per rank: the losses of the same recent steps (non-finite
            values, e.g. padding, are dropped pairwise), or a summary dict.
        step: the step to stamp on the diagnosis.
        z: how many standard errors the difference must exceed.
        min_relative: the least difference relative to the mean loss.

    Returns:
        A ``rank-divergence`` diagnosis, or ``None`` (also with fewer than two ranks).
    """
    _check_positive(z=z, min_relative=min_relative)
    entries = list(per_rank_losses)
    paired = len(entries) >= 2 and all(not isinstance(e, Mapping) for e in entries)
    if paired:
        rows = [[float(v) for v in e] for e in entries]
        length = min(len(r) for r in rows)
        steps = [i for i in range(length) if all(math.isfinite(r[i]) for r in rows)]
        if len(steps) < 3:
            return None
        means = [statistics.fmean(r[i] for i in steps) for r in rows]
        hi = max(range(len(rows)), key=lambda i: means[i])
        lo = min(range(len(rows)), key=lambda i: means[i])
        diffs = [rows[hi][i] - rows[lo][i] for i in steps]
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        stds = [statistics.stdev(r[i] for i in steps) for r in rows]
        counts = [len(steps)] * len(rows)
    else:
        summaries = [_summary(entry) for entry in entries]
        summaries = [s for s in summaries if s[2] >= 2 and math.isfinite(s[0])]
        if len(summaries) < 2:
            return None
        means = [s[0] for s in summaries]
        hi = max(range(len(summaries)), key=lambda i: means[i])
        lo = min(range(len(summaries)), key=lambda i: means[i])
        se = math.sqrt(sum(summaries[i][1] ** 2 / summaries[i][2] for i in (hi, lo)))
        stds = [s[1] for s in summaries]
        counts = [int(s[2]) for s in summaries]
    overall = statistics.fmean(means)
    difference = means[hi] - means[lo]
    z_score = difference / se if se > 0 else math.inf
    relative = difference / abs(overall) if overall else math.inf
    if z_score <= z or relative <= min_relative:
        return None
    return _diagnosis(
        "rank-divergence",
        step,
        f"rank {hi}'s mean loss {means[hi]:.3f} and rank {lo}'s {means[lo]:.3f} differ by "
        f"{relative:.0%} of the mean, {min(z_score, 1e9):.1f} standard errors "
        f"({'paired over' if paired else 'from summaries of'} {min(counts)} steps)",
        {
            "rank_means": means,
            "rank_stds": stds,
            "counts": counts,
            "paired": paired,
            "z_score": min(z_score, 1e9),
            "relative_difference": relative,
            "z": z,
            "min_relative": min_relative,
        },
        rule="shard-before-normalize",
    )


def _summary(entry: Sequence[float] | Mapping[str, float]) -> tuple[float, float, float]:
    if isinstance(entry, Mapping):
        return float(entry["mean"]), float(entry.get("std", 0.0)), float(entry.get("count", 0))
    values = _finite(entry)
    if len(values) < 2:
        return (values[0] if values else math.nan), 0.0, float(len(values))
    return statistics.fmean(values), statistics.stdev(values), float(len(values))


# -- train-val-gap ----------------------------------------------------------------------------
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
    * **overfitting** (``out-of-order``: the split sits at the wrong place, e.g. before cleaning,
      so train and validation differ in form; or the model simply memorises): the latest val loss is at least ``overfit_ratio`` times the train loss and
      above it by at least ``overfit_min_gap`` nats.

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

    Returns:
        A ``train-val-gap`` diagnosis, or ``None``.
    """
    _check_positive(leak_epochs=leak_epochs, overfit_ratio=overfit_ratio)
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
            return _diagnosis(
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
                },
                rule="train-val-overlap",
            )
    train, val = pairs[-1]
    if train > 0 and val >= overfit_ratio * train and val - train >= overfit_min_gap:
        return _diagnosis(
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
            },
            rule="out-of-order",
        )
    return None


# -- data-starvation --------------------------------------------------------------------------
def detect_data_starvation(
    wait_times: Sequence[float],
    step_times: Sequence[float],
    *,
    step: int = 0,
    min_steps: int = 20,
    max_wait_share: float = 0.5,
    min_wait_s: float = 0.02,
) -> Diagnosis | None:
    """Most of each step's wall time is spent waiting for the next batch.

    ``wait_times[i]`` is the time between the end of step ``i - 1`` and the start of step ``i``
    (fetching the batch: loading, collating, and any preprocessing done there); ``step_times[i]``
    the time from the start to the end of step ``i``. Starved when, over the last ``min_steps``
    or more, the median wait share ``wait / (wait + step)`` exceeds ``max_wait_share`` *and* the
    median wait exceeds ``min_wait_s`` (a tiny model on fast, cached data waits a few
    milliseconds for collation, which is no order error).

    Args:
        wait_times: seconds waited before each step.
        step_times: seconds each step took (on CUDA, host time: kernels are launched, not
            awaited, so a GPU-bound step looks short and the verdict leans to "starved" only when
            the host really waits for data).
        step: the step to stamp on the diagnosis.
        min_steps: the least number of steps judged.
        max_wait_share: the largest median share of waiting in a healthy run.
        min_wait_s: the least median wait, in seconds, that counts.

    Returns:
        A ``data-starvation`` diagnosis, or ``None``.
    """
    _check_positive(min_steps=min_steps, max_wait_share=max_wait_share)
    pairs = [(float(w), float(s)) for w, s in zip(wait_times, step_times) if w >= 0 and s >= 0]
    if len(pairs) < min_steps:
        return None
    shares = [w / (w + s) if w + s > 0 else 0.0 for w, s in pairs]
    share = statistics.median(shares)
    wait = statistics.median(w for w, _ in pairs)
    compute = statistics.median(s for _, s in pairs)
    if share <= max_wait_share or wait <= min_wait_s:
        return None
    return _diagnosis(
        "data-starvation",
        step,
        f"{share:.0%} of each step's wall time is spent waiting for the batch (median wait "
        f"{wait * 1000:.1f} ms, compute {compute * 1000:.1f} ms, over {len(pairs)} steps)",
        {
            "wait_share": share,
            "median_wait_s": wait,
            "median_step_s": compute,
            "steps": len(pairs),
            "max_wait_share": max_wait_share,
            "min_wait_s": min_wait_s,
        },
    )


# -- memory-swing -----------------------------------------------------------------------------
def detect_memory_swing(
    allocated_bytes: Sequence[float],
    *,
    step: int = 0,
    min_steps: int = 20,
    max_relative_swing: float = 0.25,
    min_swing_bytes: float = 256 * 2**20,
) -> Diagnosis | None:
    """On CUDA, allocated memory swings widely between steps.

    ``allocated_bytes[i]`` is ``torch.cuda.memory_allocated()`` read at the same point of each
    step (the monitor reads it at the end of the step: a host-side counter, no GPU sync). A
    steady run allocates the same at the same point of every step, up to a few buffers. Swings
    when, over at least ``min_steps`` readings, the median absolute step-to-step change exceeds
    ``max_relative_swing`` of the median reading *and* ``min_swing_bytes`` (the median ignores a
    one-off jump, such as the optimizer state appearing after the first step).

    Args:
        allocated_bytes: readings, one per step, after the warm-up.
        step: the step to stamp on the diagnosis.
        min_steps: the least number of readings judged.
        max_relative_swing: the largest median relative change in a healthy run.
        min_swing_bytes: the least median change, in bytes, that counts.

    Returns:
        A ``memory-swing`` diagnosis, or ``None``.
    """
    _check_positive(min_steps=min_steps, max_relative_swing=max_relative_swing)
    values = _finite(allocated_bytes)
    if len(values) < min_steps:
        return None
    median = statistics.median(values)
    changes = [abs(b - a) for a, b in itertools.pairwise(values)]
    swing = statistics.median(changes)
    relative = swing / median if median > 0 else 0.0
    if relative <= max_relative_swing or swing <= min_swing_bytes:
        return None
    return _diagnosis(
        "memory-swing",
        step,
        f"allocated memory changes by {swing / 2**20:.0f} MiB ({relative:.0%} of its median "
        f"{median / 2**20:.0f} MiB) from one step to the next",
        {
            "median_swing_bytes": swing,
            "median_bytes": median,
            "relative_swing": relative,
            "min_bytes": min(values),
            "max_bytes": max(values),
            "steps": len(values),
            "max_relative_swing": max_relative_swing,
            "min_swing_bytes": min_swing_bytes,
        },
    )

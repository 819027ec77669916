"""Detectors that compare ranks: per-rank train losses, and each rank's validation inputs against its train inputs.

Under DDP the ranks are each other's baseline: ranks that draw shards of one distribution and
standardise them with one set of statistics stay within their own noise of each other.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from lightning_order.checks.symptoms.table import Diagnosis, _check_positive, _diagnosis, _finite

__all__ = ["detect_input_shift", "detect_rank_divergence"]


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
            "statistic": means[hi],
            "baseline": means[lo],
            "distance": z_score if math.isfinite(z_score) else 1e9,
        },
    )


def _summary(entry: Sequence[float] | Mapping[str, float]) -> tuple[float, float, float]:
    if isinstance(entry, Mapping):
        return float(entry["mean"]), float(entry.get("std", 0.0)), float(entry.get("count", 0))
    values = _finite(entry)
    if len(values) < 2:
        return (values[0] if values else math.nan), 0.0, float(len(values))
    return statistics.fmean(values), statistics.stdev(values), float(len(values))


def detect_input_shift(
    train_stats: Sequence[Mapping[str, Sequence[float]]],
    val_stats: Sequence[Mapping[str, Sequence[float]]],
    *,
    step: int = 0,
    min_shift: float = 1.0,
    min_gap: float = 0.75,
) -> Diagnosis | None:
    """One rank's validation inputs lie far from its own train inputs while another rank's do not.

    Each entry describes one rank's floating-point inputs, column by column:
    ``{"mean": [...], "std": [...]}`` over the train batches it trained on and over the
    validation batches it scored. A rank's *shift* is, over its columns, the largest
    ``|mean_val - mean_train| / std_train + |ln(std_val / std_train)|``: 0 when its validation
    inputs look like its train inputs. Every rank is its own baseline (train), and the ranks are
    each other's (the least shifted rank). Ranks that standardise with statistics fitted once on
    the whole train split all see validation inputs like their train inputs (shift about 0.1 on
    the lab corpus); a rank that standardised only its own shard maps rows from other sources
    far off. Fires when the largest shift exceeds ``min_shift`` *and* exceeds the least shifted
    rank's by ``min_gap``: a shift that every rank shares is a split that differs from train,
    not statistics that differ by rank.

    Args:
        train_stats: per rank, the mean and standard deviation of each input column in training.
        val_stats: per rank, the same over its validation batches.
        step: the step to stamp on the diagnosis.
        min_shift: the least shift of the most shifted rank.
        min_gap: the least difference between the most and the least shifted rank.

    Returns:
        A ``rank-divergence`` diagnosis (trigger ``inputs``), or ``None`` (also with one rank).
    """
    _check_positive(min_shift=min_shift, min_gap=min_gap)
    shifts = [_shift(t, v) for t, v in zip(train_stats, val_stats)]
    known = [(rank, s) for rank, s in enumerate(shifts) if s is not None]
    if len(known) < 2:
        return None
    hi_rank, hi = max(known, key=lambda item: item[1][0])
    lo_rank, lo = min(known, key=lambda item: item[1][0])
    if hi[0] <= min_shift or hi[0] - lo[0] <= min_gap:
        return None
    return _diagnosis(
        "rank-divergence",
        step,
        f"rank {hi_rank}'s validation inputs lie {hi[0]:.2f} from its own train inputs (column {hi[1]}), "
        f"rank {lo_rank}'s {lo[0]:.2f}: the ranks map the same rows differently, as statistics fitted "
        "per shard do",
        {
            "trigger": "inputs",
            "rank_shifts": [s[0] if s is not None else None for s in shifts],
            "column": hi[1],
            "min_shift": min_shift,
            "min_gap": min_gap,
            "statistic": hi[0],
            "baseline": lo[0],
            "distance": hi[0] - lo[0],
        },
    )


def _shift(
    train: Mapping[str, Sequence[float]], val: Mapping[str, Sequence[float]]
) -> tuple[float, int] | None:
    """The largest standardised distance of the validation columns from the train columns."""
    best: tuple[float, int] | None = None
    columns = zip(train.get("mean", ()), train.get("std", ()), val.get("mean", ()), val.get("std", ()))
    for index, (mt, st, mv, sv) in enumerate(columns):
        values = (float(mt), float(st), float(mv), float(sv))
        if not all(math.isfinite(x) for x in values) or values[1] <= 1e-8 or values[3] <= 1e-8:
            continue
        distance = abs(values[2] - values[0]) / values[1] + abs(math.log(values[3] / values[1]))
        if best is None or distance > best[0]:
            best = (distance, index)
    return best

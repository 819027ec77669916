"""Detectors that compare ranks: per-rank train losses, and the input statistics of their validation shares.

Under DDP the ranks are each other's baseline: ranks that draw shards of one distribution and
standardise them with one set of statistics stay within their own noise of each other.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from lightning_order.checks.symptoms.guards import finite_values, require_positive
from lightning_order.checks.symptoms.table import Diagnosis, new_diagnosis

__all__ = ["detect_input_shift", "detect_rank_divergence", "rank_input_shift"]


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
    require_positive(z=z, min_relative=min_relative)
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
    return new_diagnosis(
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
    values = finite_values(entry)
    if len(values) < 2:
        return (values[0] if values else math.nan), 0.0, float(len(values))
    return statistics.fmean(values), statistics.stdev(values), float(len(values))


def detect_input_shift(
    val_stats: Sequence[Mapping[str, Sequence[float]]],
    *,
    step: int = 0,
    min_shift: float = 0.5,
    min_z: float = 5.0,
) -> Diagnosis | None:
    """The ranks see the same validation rows through different input statistics.

    Each entry describes one rank's floating-point validation inputs, column by column:
    ``{"mean": [...], "std": [...]}``. Under DDP every rank scores an interleaved share of one
    validation split (Lightning's distributed sampler), so the ranks' shares hold the same
    distribution, and with statistics fitted once they look alike: the ranks are each other's
    baseline. A column's *shift* between two ranks is
    ``|mean_a - mean_b| / sqrt((std_a**2 + std_b**2) / 2) + |ln(std_a / std_b)|``: about 0.1 from
    sampling alone on a few hundred rows per rank. Ranks that standardise with statistics of
    their own shard map the same rows to different values, so the shift is large (the lab's
    per-shard run: 5 to 10). A shift counts only beyond sampling noise, when the entries carry
    ``count`` (rows) and ``kurtosis`` per column: the means must differ by more than ``min_z``
    standard errors, or the log ratio of the standard deviations by more than ``min_z`` of its
    standard error ``sqrt((kurtosis - 1) / (4 n))`` per rank. A raw, heavy-tailed column (a word
    count) strays by half a standard deviation between two shares of 150 rows by chance alone,
    a column standardised per shard by many standard errors. Train inputs cannot tell this: each rank's own train inputs look
    standardised either way, and contiguous shards of drifting data differ between ranks in a
    correct run too.

    Args:
        val_stats: per rank, the mean and standard deviation of each input column over its
            validation batches (``mean``, ``std``), and optionally their rows and kurtosis
            (``count``, ``kurtosis``).
        step: the step to stamp on the diagnosis.
        min_shift: the least shift between two ranks in one column.
        min_z: the least number of standard errors, by sampling, the shift must stand out by
            (used where ``count`` is known).

    Returns:
        A ``rank-divergence`` diagnosis (trigger ``inputs``), or ``None`` (also with one rank).
    """
    require_positive(min_shift=min_shift, min_z=min_z)
    best = rank_input_shift(val_stats, min_z=min_z)
    if best is None or best[0] <= min_shift:
        return None
    shift, column, a, b = best
    return new_diagnosis(
        "rank-divergence",
        step,
        f"ranks {a} and {b} see the same validation split through different input statistics: column "
        f"{column} is {shift:.2f} apart (same statistics: about 0.1), as statistics fitted per shard make it",
        {
            "trigger": "inputs",
            "ranks": [a, b],
            "column": column,
            "rank_means": [list(stats.get("mean", ()))[column] for stats in val_stats],
            "rank_stds": [list(stats.get("std", ()))[column] for stats in val_stats],
            "min_shift": min_shift,
            "min_z": min_z,
            "statistic": shift,
            "baseline": 0.0,
            "distance": shift,
        },
    )


def rank_input_shift(
    val_stats: Sequence[Mapping[str, Sequence[float]]],
    min_z: float | None = None,
) -> tuple[float, int, int, int] | None:
    """The largest shift between two ranks' validation input columns: ``(shift, column, rank_a, rank_b)``.

    ``None`` with fewer than two ranks or no comparable column. With ``min_z``, only columns
    whose shift stands out of sampling noise by that many standard errors count. See
    :func:`detect_input_shift`.
    """
    best: tuple[float, int, int, int] | None = None
    for a in range(len(val_stats)):
        for b in range(a + 1, len(val_stats)):
            found = _shift(val_stats[a], val_stats[b], min_z)
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], found[1], a, b)
    return best


def _shift(
    a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], min_z: float | None = None
) -> tuple[float, int] | None:
    """The largest standardised distance between two ranks' columns, and its column."""
    best: tuple[float, int] | None = None
    for index, (ma, sa, mb, sb) in enumerate(
        zip(a.get("mean", ()), a.get("std", ()), b.get("mean", ()), b.get("std", ()))
    ):
        values = (float(ma), float(sa), float(mb), float(sb))
        if not all(math.isfinite(x) for x in values) or values[1] <= 1e-8 or values[3] <= 1e-8:
            continue
        pooled = math.sqrt((values[1] ** 2 + values[3] ** 2) / 2)
        distance = abs(values[0] - values[2]) / pooled + abs(math.log(values[1] / values[3]))
        if min_z is not None and _sampling_z(a, b, index, values) <= min_z:
            continue
        if best is None or distance > best[0]:
            best = (distance, index)
    return best


def _sampling_z(
    a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], index: int, values: tuple[float, ...]
) -> float:
    """How many standard errors, by sampling, a column's shift between two ranks stands out by.

    The larger of the means' difference over its standard error and the log ratio of the
    standard deviations over its own (``sqrt((kurtosis - 1) / (4 n))`` per rank, the normal
    value 3 where the kurtosis is unknown). Infinite where the rows are unknown (no test).
    """
    ma, sa, mb, sb = values
    counts = [_entry(x, "count", index) for x in (a, b)]
    if any(c is None or c < 2 for c in counts):
        return math.inf
    na, nb = counts
    kurtosis = [_entry(x, "kurtosis", index) for x in (a, b)]
    # A floor under kurtosis - 1: a two-valued column at p = 0.5 (kurtosis 1) still strays by sampling.
    ka, kb = (max(k, 1.5) if k is not None else 3.0 for k in kurtosis)
    mean_se = math.sqrt(sa * sa / na + sb * sb / nb)
    scale_se = math.sqrt((ka - 1) / (4 * na) + (kb - 1) / (4 * nb))
    z_mean = abs(ma - mb) / mean_se if mean_se > 0 else math.inf
    z_scale = abs(math.log(sa / sb)) / scale_se if scale_se > 0 else math.inf
    return max(z_mean, z_scale)


def _entry(stats: Mapping[str, Sequence[float]], field: str, index: int) -> float | None:
    values = stats.get(field)
    if values is None or index >= len(values):
        return None
    value = float(values[index])
    return value if math.isfinite(value) else None

"""Rank checks: do all processes hold the same prepared data?

Input is one plain dict per rank (what the callback all-gathered), so every rank runs this on
the same list and reaches the same decision. A summary may hold:

- ``rank`` (int);
- ``fingerprints``: ``{"manifest", "split", "statistics", "vocab"}`` -> str, from
  ``data_fingerprints()``; any disagreement is ``rank-mismatch``;
- ``data_parallel``: ``{"size", "rank", ...}`` (:class:`lightning_order.parallelism.DataParallel`):
  ranks of one data-parallel rank form one tensor-parallel group, which must read the same share
  of the epoch; different data-parallel ranks must read different shares. Without it every rank
  is its own data-parallel rank (DDP);
- ``shard_length`` (int): rows (or batches) of the local train shard; unequal lengths make DDP
  hang at the first collective a short rank no longer reaches, so they are reported up front;
- ``shard_start`` (int): the rank's offset in every global batch (its share of the epoch);
- ``fitted_mean`` (list of floats) and ``feature_names``: the statistics the rank normalises
  with (from its ledger), to name an example when the statistics fingerprints differ;
- ``feature_mean`` / ``feature_std`` (lists of floats) and ``feature_rows`` (int): per-feature
  statistics of a sample of the local shard's ``features``. They are compared to the pooled
  values with a tolerance of several standard errors, so sampling noise never trips them.

Missing keys are skipped: a plain datamodule has no fingerprints, a run without features has no
feature statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_order.rules import Violation

__all__ = ["check_ranks", "check_shares", "data_parallel_groups", "differing_features"]

# What each data fingerprint stands for, and the step that produced it.
_FINGERPRINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "manifest": ("prepared data (manifest)", ("shard",)),
    "split": ("train/validation split", ("split", "shard")),
    "statistics": ("fitted feature statistics", ("fit_features", "shard")),
    "vocab": ("vocabulary", ("build_vocab", "shard")),
    "tokenizer": ("tokenizer in use", ("build_vocab", "shard")),
    "corpus": ("corpus", ("load", "shard")),
}


def _groups(values: Mapping[int, Any]) -> str:
    """``rank 0, 1: 'ab12…'; rank 2: 'cd34…'`` for a rank -> value map."""
    by_value: dict[str, list[int]] = {}
    for rank, value in values.items():
        by_value.setdefault(str(value), []).append(rank)
    parts = []
    for value, ranks in by_value.items():
        shown = value if len(value) <= 14 else value[:12] + "…"
        parts.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {shown}")
    return "; ".join(parts)


def check_ranks(
    summaries: Sequence[Mapping[str, Any]], *, z_max: float = 6.0, min_rows: int = 32
) -> list[Violation]:
    """``rank-mismatch``: the ranks disagree on their prepared data.

    Args:
        summaries: one dict per rank (see the module docstring), in rank order.
        z_max: how many standard errors a rank's feature mean or std may sit from the pooled
            value before it counts as a disagreement.
        min_rows: fewer sampled rows than this on any rank skips the feature comparison.

    Returns:
        One violation per disagreeing item: each differing fingerprint, unequal shard lengths,
        features whose distribution differs between ranks.
    """
    if len(summaries) < 2:
        return []
    ranks = [int(s.get("rank", i)) for i, s in enumerate(summaries)]
    violations: list[Violation] = []

    keys = dict.fromkeys(k for s in summaries for k in (s.get("fingerprints") or {}))
    for key in keys:
        values = {r: (s.get("fingerprints") or {}).get(key) for r, s in zip(ranks, summaries)}
        present = {r: v for r, v in values.items() if v is not None}
        if len(set(present.values())) > 1:
            meaning, steps = _FINGERPRINTS.get(key, (key, ("shard",)))
            example = _fitted_example(summaries, ranks) if key == "statistics" else ""
            violations.append(
                Violation(
                    "rank-mismatch",
                    steps,
                    f"the ranks hold different {meaning}: {_groups(present)}{example}",
                    details={"item": key, "values": present},
                )
            )

    lengths = {r: s["shard_length"] for r, s in zip(ranks, summaries) if s.get("shard_length") is not None}
    if len(set(lengths.values())) > 1:
        violations.append(
            Violation(
                "rank-mismatch",
                ("shard",),
                f"the ranks' train shards have unequal lengths ({_groups(lengths)}): the shorter rank "
                "would stop early and DDP would hang waiting for it",
                symptom="training hangs at the end of the first epoch (a rank waits in a collective)",
                fix="shard to equal lengths (drop or pad the remainder), e.g. OrderedDataModule's shard step",
                details={"item": "shard_length", "values": lengths},
            )
        )

    violations += check_shares(summaries)
    differing = differing_features(summaries, ranks, z_max=z_max, min_rows=min_rows)
    if differing:
        shown = ", ".join(f"{name} ({why})" for name, why in differing[:4])
        violations.append(
            Violation(
                "rank-mismatch",
                ("shard",),
                f"{len(differing)} feature{'s' if len(differing) != 1 else ''} differ between ranks beyond "
                f"sampling noise: {shown}{', ...' if len(differing) > 4 else ''}",
                details={"item": "features", "features": [name for name, _ in differing]},
            )
        )
    return violations


def data_parallel_groups(summaries: Sequence[Mapping[str, Any]]) -> dict[int, list[int]]:
    """Data-parallel rank -> the positions in ``summaries`` of its ranks (one tensor-parallel group).

    A summary without ``data_parallel`` is a data-parallel rank of its own (DDP).
    """
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(summaries):
        dp = s.get("data_parallel") or {}
        key = int(dp["rank"]) if dp.get("rank") is not None else int(s.get("rank", i))
        groups.setdefault(key, []).append(i)
    return groups


def _share_violation(message: str, dimension: str, values: Mapping[int, Any]) -> Violation:
    return Violation(
        "rank-mismatch",
        ("shard",),
        message,
        symptom="tensor-parallel collectives mix different inputs, or data-parallel ranks train on the "
        "same samples: no error, a slower or wrong run",
        fix="shard by the data-parallel rank and size (trainer.strategy.distributed_sampler_kwargs, or "
        "device_mesh['data_parallel']), never by global_rank and world_size; OrderedDataModule does",
        details={"item": "share", "dimension": dimension, "values": dict(values)},
    )


def check_shares(summaries: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """``rank-mismatch``: the ranks' shares of the epoch do not follow the data-parallel dimension.

    Ranks of one tensor-parallel group (one data-parallel rank) must read the same share; ranks of
    different data-parallel ranks must read different ones. The share is ``shard_start``.

    Args:
        summaries: one dict per rank (``rank``, ``data_parallel``, ``shard_start``), in rank order.

    Returns:
        At most one violation per dimension, naming the group and the ranks.
    """
    ranks = [int(s.get("rank", i)) for i, s in enumerate(summaries)]
    starts = {i: s.get("shard_start") for i, s in enumerate(summaries) if s.get("shard_start") is not None}
    if len(starts) < 2:
        return []
    found: list[Violation] = []
    heads: dict[int, tuple[int, Any]] = {}  # data-parallel rank -> (global rank, its share)
    for dp_rank, members in data_parallel_groups(summaries).items():
        shares = {ranks[i]: starts[i] for i in members if i in starts}
        if len(set(shares.values())) > 1 and not found:
            found.append(
                _share_violation(
                    f"ranks {', '.join(map(str, shares))} form one tensor-parallel group (data-parallel rank "
                    f"{dp_rank}) but read different shares of the epoch (offsets in the global batch: "
                    f"{_groups(shares)}): the data is sharded by the global rank, so the group computes on "
                    "different inputs",
                    "tensor_parallel",
                    shares,
                )
            )
        if shares:
            heads[dp_rank] = next(iter(shares.items()))
    seen: dict[Any, tuple[int, int]] = {}
    for dp_rank, (rank, start) in heads.items():
        if start in seen:
            other_dp, other = seen[start]
            return [
                *found,
                _share_violation(
                    f"data-parallel ranks {other_dp} and {dp_rank} (ranks {other} and {rank}) read the same "
                    f"share of the epoch (offset {start} in every global batch): the data is not split along "
                    "the data-parallel dimension",
                    "data_parallel",
                    {other: start, rank: start},
                ),
            ]
        seen[start] = (dp_rank, rank)
    return found


def _fitted_example(summaries: Sequence[Mapping[str, Any]], ranks: list[int]) -> str:
    """``; e.g. 'amount' is normalised with mean 1.2e+04 on rank 0, 3.4e+04 on rank 1``, from the
    statistics each rank fitted (``fitted_mean``), naming the feature whose means differ most."""
    means = {r: s["fitted_mean"] for r, s in zip(ranks, summaries) if s.get("fitted_mean")}
    if len(means) < 2 or len({len(m) for m in means.values()}) != 1:
        return ""
    names = next((s.get("feature_names") for s in summaries if s.get("feature_names")), None)

    def spread(j: int) -> float:
        values = [float(m[j]) for m in means.values()]
        return (max(values) - min(values)) / (abs(sum(values) / len(values)) + 1e-12)

    j = max(range(len(next(iter(means.values())))), key=spread, default=None)
    if j is None or spread(j) == 0:
        return ""
    name = names[j] if names and j < len(names) else f"feature {j}"
    per_rank = ", ".join(f"{float(m[j]):.3g} on rank {r}" for r, m in means.items())
    return f"; e.g. '{name}' is normalised with mean {per_rank}"


def differing_features(
    summaries: Sequence[Mapping[str, Any]], ranks: list[int], *, z_max: float, min_rows: int
) -> list[tuple[str, str]]:
    """The features whose sampled statistics on some rank differ from the pooled ones beyond noise.

    Args:
        summaries: one dict per rank with ``feature_mean``, ``feature_std``, ``feature_rows``
            (and optionally ``feature_names``); ranks without them are left out.
        ranks: the rank of each summary.
        z_max: standard errors a rank's mean may lie from the pooled mean (twice that for the std).
        min_rows: fewer sampled rows on any rank: nothing is compared.

    Returns:
        ``(feature name, why)`` pairs, at most one per feature.
    """
    stats = [
        (r, s["feature_mean"], s["feature_std"], int(s.get("feature_rows", 0)))
        for r, s in zip(ranks, summaries)
        if s.get("feature_mean") is not None and s.get("feature_std") is not None
    ]
    if len(stats) < 2 or any(n < min_rows for *_, n in stats):
        return []
    widths = {len(mean) for _, mean, _, _ in stats} | {len(std) for _, _, std, _ in stats}
    if len(widths) > 1:
        return [("features", f"different widths per rank: {sorted(widths)}")]
    names = next((s.get("feature_names") for s in summaries if s.get("feature_names")), None)
    width = widths.pop()
    total = sum(n for *_, n in stats)
    found = []
    for j in range(width):
        pooled_mean = sum(mean[j] * n for _, mean, _, n in stats) / total
        # Pooled variance: within-rank variance plus the spread of the rank means.
        pooled_var = (
            sum(n * (std[j] ** 2 + (mean[j] - pooled_mean) ** 2) for _, mean, std, n in stats) / total
        )
        pooled_std = math.sqrt(max(pooled_var, 0.0))
        if pooled_std < 1e-12:
            continue  # constant on every rank: nothing to compare beyond equal means
        name = names[j] if names and j < len(names) else f"feature {j}"
        for rank, mean, std, n in stats:
            mean_z = abs(mean[j] - pooled_mean) / (pooled_std / math.sqrt(n))
            # Std's standard error is about sigma / sqrt(2n) for normal data; heavy tails make it
            # larger, hence also the relative-size floor.
            std_z = abs(std[j] - pooled_std) / (pooled_std / math.sqrt(2 * n))
            if mean_z > z_max and abs(mean[j] - pooled_mean) > 0.1 * pooled_std:
                found.append((name, f"rank {rank} mean {mean[j]:.3g} vs {pooled_mean:.3g} pooled"))
                break
            if std_z > 2 * z_max and abs(std[j] / pooled_std - 1.0) > 0.25:
                found.append((name, f"rank {rank} std {std[j]:.3g} vs {pooled_std:.3g} pooled"))
                break
    return found

"""Checks on what any datamodule's datasets hold, from content summaries (no ledger, no glue needed).

The validator summarises each rank's train and validation datasets (see
:mod:`lightning_order.callbacks.validator.content`) as plain dicts; the functions here judge them. A split
summary holds:

- ``length`` (int) and ``whole`` (bool: every item was hashed, not a sample);
- ``ids``: one int hash per item read (the same indices on every rank), of the item's
  non-float parts (token ids, text, labels): which *rows* a rank holds, whatever their
  normalisation; ``None`` when items hold floats only;
- ``inputs``: one int hash per item read, of everything but the label: identical *inputs*;
- ``floats``: ``{key: {"mean": [...], "std": [...], "rows": n}}`` per floating-point tensor of
  the collated sample, whatever its key;
- ``random`` (bool): reading an item twice gave two different hashes (random augmentation);
  such a split is never compared across ranks.

Every rank runs these on the same gathered list, so all ranks reach the same decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from lightning_order.checks.estimates import RateEstimate
from lightning_order.checks.rank_settings import check_rank_settings
from lightning_order.checks.ranks import data_parallel_groups, differing_features
from lightning_order.rules import Violation

__all__ = ["check_rank_datasets", "check_twin_rate", "twin_estimate"]

_NAMES = {"train": "train", "val": "validation"}
#: Share of items two ranks may have in common and still count as disjoint shards.
_MAX_SHARED = 0.05
#: Relative difference of a float statistic over the very same rows that counts as different.
_SAME_ROWS_RTOL = 1e-4


def _hashes(split: Mapping[str, Any]) -> np.ndarray | None:
    values = split.get("ids") if split.get("ids") is not None else split.get("inputs")
    return None if values is None else np.asarray(values, dtype=np.int64)


def _shared(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the smaller set's distinct items that are also in the other set."""
    ua, ub = np.unique(a), np.unique(b)
    if not ua.size or not ub.size:
        return 0.0
    return float(np.isin(ua, ub).sum()) / min(ua.size, ub.size)


def check_rank_datasets(summaries: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """``rank-mismatch`` or ``shard-before-normalize`` from every rank's dataset summaries.

    Args:
        summaries: one dict per rank, in rank order: ``rank``, ``train`` and ``val`` (split
            summaries, see the module docstring, or ``None``), ``model`` (the model's dims on
            that rank, e.g. ``embedding_rows``) and ``tokenizer`` (the fingerprint of the
            tokenizer in use, or ``None``).

    Returns:
        - ``rank-mismatch`` when ranks use different tokenizers (alone: what else differs follows
          from it, and its fix is the tokenizer's);
        - ``rank-mismatch`` when a datamodule setting or the items' shape differs (alone, naming
          the field: :func:`~lightning_order.checks.rank_settings.check_rank_settings`);
        - ``rank-mismatch`` when ranks hold different validation sets (Lightning's sampler shards
          validation, so every rank should hold all of it), or train sets that differ but share
          items (each rank split the data on its own: ``random_split`` without a generator), or
          built models of different sizes;
        - ``shard-before-normalize`` when ranks hold the very same rows but their floating-point
          tensors differ (each rank normalised with statistics of its own shard);
        - ``rank-mismatch`` when disjoint shards' float tensors differ beyond sampling noise.
    """
    if len(summaries) < 2:
        return []
    ranks = [int(s.get("rank", i)) for i, s in enumerate(summaries)]
    tokenizers = _tokenizers(summaries, ranks)
    if tokenizers:  # every other difference (ids, model sizes) follows from it: one finding, its fix
        return tokenizers
    settings = check_rank_settings(summaries, ranks)
    if settings:  # another block_size on one rank: the field and its fix, not the split's (#37)
        return settings
    violations = _model_sizes(summaries, ranks)
    for split in ("val", "train"):
        parts = [s.get(split) for s in summaries]
        if any(p is None or p.get("random") for p in parts):
            continue
        # Validation: whole on every rank. Train: one tensor-parallel group reads one share, so
        # ranks are compared within their group and across groups, never as strangers inside one.
        found = (
            _compare_split(split, parts, ranks) if split == "val" else _compare_train(summaries, parts, ranks)
        )
        # One finding per rule: the validation split's evidence, when it has some, is enough.
        violations += [v for v in found if (v.rule, v.steps) not in {(w.rule, w.steps) for w in violations}]
    return violations


def same_rows_compared(summaries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether :func:`check_rank_datasets` compared float columns of the very same rows on every rank.

    True with two or more ranks when a split holds the same items on every rank (the validation
    split, whole on every rank) with float columns on each: per-rank statistics would have shown
    there as ``shard-before-normalize``.

    Args:
        summaries: one dict per rank, as for :func:`check_rank_datasets`.
    """
    if len(summaries) < 2:
        return False
    for split in ("val", "train"):
        parts = [s.get(split) for s in summaries]
        if any(p is None or p.get("random") or not p.get("floats") for p in parts):
            continue
        if _same_items(parts, [_hashes(p) for p in parts]):
            return True
    return False


def _same_items(parts: Sequence[Mapping[str, Any]], hashes: Sequence[np.ndarray | None]) -> bool:
    """Every rank's split holds the very same items (same length, same item hashes in order)."""
    if any(h is None for h in hashes) or len({int(p.get("length", 0)) for p in parts}) != 1:
        return False
    return all(np.array_equal(hashes[0], h) for h in hashes[1:])


def _tokenizers(summaries: Sequence[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    found = {r: s.get("tokenizer") for r, s in zip(ranks, summaries) if s.get("tokenizer")}
    if len(set(found.values())) < 2:
        return []
    groups: dict[str, list[int]] = {}
    for rank, fp in found.items():
        groups.setdefault(fp, []).append(rank)
    shown = "; ".join(f"ranks {', '.join(map(str, r))}: {fp[:12]}" for fp, r in groups.items())
    return [
        Violation(
            "rank-mismatch",
            ("build_vocab", "shard"),
            f"the ranks use different tokenizers (fingerprints {shown}): each rank trained or changed its own, "
            "so one token id means different text on different ranks",
            fix="train the tokenizer once (offline, or in prepare_data on rank 0), save tokenizer.json, and load "
            "that file on every rank in setup; add special tokens before saving it",
            details={"item": "tokenizer", "values": found},
        )
    ]


def _model_sizes(summaries: Sequence[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    rows = {r: (s.get("model") or {}).get("embedding_rows") for r, s in zip(ranks, summaries)}
    rows = {r: v for r, v in rows.items() if v is not None}
    if len(set(rows.values())) < 2:
        return []
    shown = "; ".join(f"rank {r}: {v}" for r, v in rows.items())
    return [
        Violation(
            "rank-mismatch",
            ("init_model", "build_vocab"),
            f"the ranks built models of different sizes (token embedding rows {shown}): each rank sized "
            "it from its own data, and DDP would fail with 'params[0] ... appears not to match'",
            fix="build the vocabulary once (prepare_data, or setup from the same data on every rank) "
            "and size the model from it",
            details={"item": "model", "values": rows},
        )
    ]


def _compare_split(split: str, parts: list[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    name = _NAMES[split]
    hashes = [_hashes(p) for p in parts]
    if any(h is None for h in hashes):
        return []
    lengths = [int(p.get("length", 0)) for p in parts]
    if _same_items(parts, hashes):
        return _same_rows_floats(split, parts, ranks)
    for (i, a), (j, b) in combinations(enumerate(hashes), 2):
        shared = _shared(a, b)
        # Lightning's sampler shards the validation set: every rank should hold all of it. Train
        # sets may be disjoint shards, but never partly the same rows.
        if split == "val" or shared >= _MAX_SHARED:
            sampled = "" if parts[i].get("whole") and parts[j].get("whole") else " (sampled)"
            how = (
                f"that share {shared:.0%} of their items{sampled}"
                if shared >= _MAX_SHARED
                else "with no item in common (different rows, or the same rows encoded differently, "
                "e.g. with a vocabulary each rank built from its own split)"
            )
            return [
                Violation(
                    "rank-mismatch",
                    ("split", "shard"),
                    f"ranks {ranks[i]} and {ranks[j]} hold different {name} sets {how} ({name} lengths: "
                    f"{', '.join(f'rank {r}: {n}' for r, n in zip(ranks, lengths))}): each rank split "
                    "the data on its own, so one rank trains on another's validation rows",
                    symptom="validation metrics differ per rank and are inflated; ranks may build "
                    "different vocabularies and DDP fails or trains on mismatched data",
                    fix="split the same way on every rank: random_split(..., "
                    "generator=torch.Generator().manual_seed(42)), or split in prepare_data and load "
                    "the split in setup",
                    details={"item": split, "ranks": [ranks[i], ranks[j]], "shared": shared},
                )
            ]
    return _disjoint_floats(split, parts, ranks)


def _compare_train(
    summaries: Sequence[Mapping[str, Any]], parts: list[Mapping[str, Any]], ranks: list[int]
) -> list[Violation]:
    """The train split: identical within each tensor-parallel group, compared as shards across groups."""
    groups = data_parallel_groups(summaries)
    found: list[Violation] = []
    for dp_rank, members in groups.items():
        group, group_ranks = [parts[i] for i in members], [ranks[i] for i in members]
        hashes = [_hashes(p) for p in group]
        if len(members) < 2 or any(h is None for h in hashes):
            continue
        if _same_items(group, hashes):
            found += _same_rows_floats("train", group, group_ranks)
        elif not found:
            found.append(_group_differs(dp_rank, group, group_ranks))
    heads = [members[0] for members in groups.values()]
    if len(heads) > 1:
        found += _compare_split("train", [parts[i] for i in heads], [ranks[i] for i in heads])
    return found


def _group_differs(dp_rank: int, group: list[Mapping[str, Any]], ranks: list[int]) -> Violation:
    lengths = ", ".join(f"rank {r}: {int(p.get('length', 0))}" for r, p in zip(ranks, group))
    return Violation(
        "rank-mismatch",
        ("shard",),
        f"ranks {', '.join(map(str, ranks))} form one tensor-parallel group (data-parallel rank {dp_rank}) but "
        f"hold different train sets (train lengths: {lengths}): the data is sharded by the global rank, so the "
        "group computes on different inputs",
        fix="shard by the data-parallel rank and size (trainer.strategy.distributed_sampler_kwargs, or "
        "device_mesh['data_parallel']), never by global_rank and world_size",
        details={"item": "train", "dimension": "tensor_parallel", "ranks": ranks},
    )


def _same_rows_floats(split: str, parts: list[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    """The same rows on every rank: their float statistics must agree to rounding."""
    first = parts[0].get("floats") or {}
    for key, stats in first.items():
        for field in ("mean", "std"):
            reference = np.asarray(stats[field], dtype=float)
            for rank, part in zip(ranks[1:], parts[1:]):
                other = (part.get("floats") or {}).get(key)
                if other is None:
                    continue
                values = np.asarray(other[field], dtype=float)
                if values.shape != reference.shape:
                    continue
                gap = np.abs(values - reference)
                if np.any(gap > _SAME_ROWS_RTOL * (1.0 + np.abs(reference))):
                    column = int(np.argmax(gap))
                    return [
                        Violation(
                            "shard-before-normalize",
                            ("fit_features", "shard"),
                            f"the ranks hold the same {_NAMES[split]} rows (same token ids, text and "
                            f"labels at the same indices) but '{key}' differs: column {column} has "
                            f"{field} {reference[column]:.4g} on rank {ranks[0]} and "
                            f"{values[column]:.4g} on rank {rank} over those rows: each rank normalised "
                            "with statistics of its own shard",
                            fix="fit the statistics once on the whole train split (prepare_data, or "
                            "setup from the full train split on every rank), then let the sampler shard",
                            details={"item": split, "key": key, "column": column},
                        )
                    ]
    return []


def _disjoint_floats(split: str, parts: list[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    """Different rows per rank (shards): their float distributions must agree within sampling noise."""
    found = []
    keys = set.intersection(*(set(p.get("floats") or {}) for p in parts))
    for key in sorted(keys):
        summaries = [
            {
                "rank": r,
                "feature_mean": p["floats"][key]["mean"],
                "feature_std": p["floats"][key]["std"],
                "feature_rows": p["floats"][key]["rows"],
                "feature_names": [f"{key}[{j}]" for j in range(len(p["floats"][key]["mean"]))],
            }
            for r, p in zip(ranks, parts)
        ]
        found += differing_features(summaries, ranks, z_max=6.0, min_rows=32)
    if not found:
        return []
    shown = ", ".join(f"{name} ({why})" for name, why in found[:4])
    return [
        Violation(
            "rank-mismatch",
            ("shard",),
            f"the ranks' {_NAMES[split]} shards differ beyond sampling noise: {shown}"
            f"{', ...' if len(found) > 4 else ''}",
            details={"item": f"{split}-floats", "features": [name for name, _ in found]},
        )
    ]


def twin_estimate(
    train_inputs: Sequence[int] | np.ndarray,
    val_inputs: Sequence[int] | np.ndarray,
    *,
    train_rows: int | None = None,
    val_rows: int | None = None,
) -> RateEstimate | None:
    """The share of validation rows whose inputs have an identical train twin, with its sample and interval.

    Exact (``RateEstimate.exact``) when every train and validation row was hashed; otherwise
    extrapolated: the observed share divided by the share of train rows hashed (``coverage``).

    Args:
        train_inputs: input hashes of (a sample of) the train rows.
        val_inputs: input hashes of (a sample of) the validation rows.
        train_rows: the train split's size, when ``train_inputs`` is a sample.
        val_rows: the validation split's size, when ``val_inputs`` is a sample.

    Returns:
        The estimate, or ``None`` when either side is empty.
    """
    train = np.unique(np.asarray(train_inputs, dtype=np.int64))
    val = np.asarray(val_inputs, dtype=np.int64).ravel()
    if not train.size or not val.size:
        return None
    covered = min(1.0, len(train_inputs) / train_rows) if train_rows else 1.0
    exact = covered >= 1.0 and (val_rows is None or val.size >= val_rows)
    return RateEstimate(int(np.isin(val, train).sum()), int(val.size), coverage=covered, exact=exact)


#: Distinct train inputs, as a share of the rows read, at or below which the rows are judged cut alike.
COLLAPSED_SHARE = 0.02


def check_twin_rate(
    train_inputs: Sequence[int] | np.ndarray,
    val_inputs: Sequence[int] | np.ndarray,
    *,
    threshold: float = 0.01,
    train_rows: int | None = None,
    val_rows: int | None = None,
) -> list[Violation]:
    """``train-val-overlap``: the share of validation rows whose inputs have an identical train twin.

    Reported whatever the train split's own repeat rate: duplicates that straddle the split score
    the model on rows it trained on, whether or not the data repeats by nature. A rate from whole
    splits is a fact and decides by itself; a rate extrapolated from samples
    (:func:`twin_estimate`) raises only on at least
    :data:`~lightning_order.checks.estimates.MIN_HITS` twins with its whole confidence interval
    above ``threshold`` (one coincidental twin in 512 sampled windows is no evidence of a leak).

    Args:
        train_inputs: input hashes of (a sample of) the train rows.
        val_inputs: input hashes of (a sample of) the validation rows.
        threshold: the largest rate that passes (``0.01``: one validation row in 100; a capped vocabulary maps some distinct short texts to identical inputs, so 0 would cry wolf).
        train_rows: the train split's size, when ``train_inputs`` is a sample.
        val_rows: the validation split's size, when ``val_inputs`` is a sample.

    Returns:
        One violation with the rate, the sample, its interval and the threshold, or nothing.
    """
    estimate = twin_estimate(train_inputs, val_inputs, train_rows=train_rows, val_rows=val_rows)
    if estimate is None or not estimate.above(threshold):
        return []
    train = np.unique(np.asarray(train_inputs, dtype=np.int64))
    repeat = 1.0 - train.size / max(len(train_inputs), 1)
    estimated = (
        "" if estimate.coverage >= 1.0 else f", estimated from {estimate.coverage:.0%} of the train rows"
    )
    cause = "exact duplicates straddle the split"
    fix = (
        "deduplicate before the split, or split by a hash of the cleaned input (or a group "
        "column) so duplicates land on the same side"
    )
    if train.size <= max(1, COLLAPSED_SHARE * len(train_inputs)):
        # A handful of inputs for all rows is no leak to deduplicate: the rows were cut to their
        # common start (litgpt SFT with max_seq_length shorter than the prompt template, #48).
        cause = (
            f"the train rows hold only {train.size} distinct input(s): rows all alike, cut to the same first "
            "tokens (a max_seq_length or truncation shorter than the prompt template) or of a few values by nature"
        )
        fix = (
            "if the rows were cut, raise max_seq_length above the longest prompt (template included) or "
            "truncate the prompt, not the row; if the data holds few distinct inputs by nature, split by group"
        )
    return [
        Violation(
            "train-val-overlap",
            ("split",),
            f"{estimate.hits} of {estimate.n} validation rows checked ({estimate.rate:.1%}{estimated}) have an "
            f"identical twin in the train split: {estimate.describe('validation rows')}, above the threshold of "
            f"{threshold:.1%} (train itself repeats {repeat:.1%} of its rows): {cause}",
            fix=fix + "; state the rate you accept with "
            "OrderValidator(overlap_threshold=...) (lightning-order: --order.overlap_threshold)",
            details={
                "twins": estimate.hits,
                "checked": estimate.n,
                "rate": estimate.rate,
                "threshold": threshold,
                "estimate": estimate.to_dict(),
                "distinct_train": int(train.size),
            },
        )
    ]

"""Leakage checks: fitted steps that saw validation rows, and examples in both splits.

Overlap is judged on int64 hashes, never on text: ``OrderedDataModule`` keeps the hash of each
row's cleaned split key in a ``key_hash`` column, so comparing splits costs one sort of two integer
arrays (one sort of the smaller split, one binary search per row of the larger). Above ``max_rows`` the arrays are subsampled *by hash
value* (keep the hashes whose low bits are zero), which keeps a duplicated key on both sides or
on neither, so a sample never invents an overlap and finds a large one at the sampled rate.

For a plain datamodule without key hashes, :func:`row_hashes` hashes the input tensors of sampled
rows; identical inputs are then the duplicates. Datasets whose inputs repeat by nature (a few
categorical columns) would make that cry wolf, so :func:`check_row_overlap` stays silent when
the train rows already repeat among themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import xxhash

from lightning_order.checks.estimates import RateEstimate
from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.rules import Violation

__all__ = ["check_fitted_on_train", "check_key_overlap", "check_row_overlap", "row_hashes"]

#: The rules a fitted step that learned from the wrong rows is reported under.
_FITTED_RULES = frozenset({"fit-before-split", "shard-before-normalize"})

#: Above this share of repeated rows inside the train sample, identical inputs are normal data.
_NATURAL_REPEAT_RATE = 0.01


def check_fitted_on_train(
    ledger: StepLedger | Iterable[StepRecord], pipeline: Pipeline = STANDARD_PIPELINE
) -> list[Violation]:
    """``fit-before-split`` (or ``shard-before-normalize``): a fitted step did not learn from the train split.

    Reads each fitted step's ``fitted_on`` fingerprint against the split's ``parts["train"]``
    (the judgement is :meth:`Pipeline.check`'s; this keeps only the leakage rules).

    Args:
        ledger: what ran.
        pipeline: the DAG naming which steps are fitted and which partition.
    """
    return [v for v in pipeline.check(ledger) if v.rule in _FITTED_RULES]


def _stride(size: int, max_rows: int) -> int:
    """The smallest power of two that brings ``size`` rows to at most ``max_rows``."""
    stride = 1
    while size // stride > max_rows:
        stride *= 2
    return stride


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_set`` (one binary search each; no sort of ``values``).

    Cheaper than ``np.intersect1d``/``np.isin``, which sort both arrays together.
    """
    if sorted_set.size == 0:
        return np.zeros(values.shape, dtype=bool)
    index = np.searchsorted(sorted_set, values)
    index[index == sorted_set.size] = 0
    return sorted_set[index] == values


def check_key_overlap(
    train_hashes: Sequence[int] | np.ndarray,
    val_hashes: Sequence[int] | np.ndarray,
    *,
    max_rows: int = 2_000_000,
    source: str = "cleaned split keys",
) -> list[Violation]:
    """``train-val-overlap``: a key hash that is in both splits.

    Args:
        train_hashes: int64 hashes of the train rows' keys (any order, repeats allowed).
        val_hashes: the same for the validation rows.
        max_rows: rows compared per side at most; larger inputs are subsampled by hash value.
        source: what the hashes are of, for the message.

    Returns:
        One violation naming how many keys and validation rows overlap, or nothing.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    train = np.asarray(train_hashes, dtype=np.int64).ravel()
    val = np.asarray(val_hashes, dtype=np.int64).ravel()
    if train.size == 0 or val.size == 0:
        return []
    stride = _stride(max(train.size, val.size), max_rows)
    if stride > 1:
        train = train[(train & (stride - 1)) == 0]
        val = val[(val & (stride - 1)) == 0]
    common = np.unique(train[_member(train, np.sort(val))]) if train.size >= val.size else None
    if common is None:
        common = np.unique(val[_member(val, np.sort(train))])
    if common.size == 0:
        return []
    val_rows = int(_member(val, common).sum())
    sampled = f", a 1/{stride} sample by hash" if stride > 1 else ""
    examples = ", ".join(f"{int(h):#x}" for h in common[:3])
    return [
        Violation(
            "train-val-overlap",
            ("split",),
            f"{common.size} distinct {source} are in both splits: {val_rows} of {val.size} validation "
            f"rows checked{sampled} also appear in the train split (key hashes {examples}"
            f"{', ...' if common.size > 3 else ''})",
            details={
                "keys": int(common.size),
                "val_rows": val_rows,
                "checked": int(val.size),
                "stride": stride,
            },
        )
    ]


def row_hashes(*columns: np.ndarray) -> np.ndarray:
    """One int64 hash per row of the given arrays (rows along the first axis).

    Args:
        *columns: arrays with the same number of rows (e.g. ``input_ids`` B × L, ``features`` B × F).

    Returns:
        An int64 array of length B; equal rows (in every column) get equal hashes.
    """
    if not columns:
        raise ValueError("row_hashes needs at least one array")
    arrays = [np.ascontiguousarray(np.asarray(c)) for c in columns]
    rows = {a.shape[0] for a in arrays}
    if len(rows) != 1:
        raise ValueError(f"row_hashes: the arrays have different numbers of rows: {sorted(rows)}")
    raw = np.concatenate([a.reshape(a.shape[0], -1).view(np.uint8) for a in arrays], axis=1)
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(row.tobytes()) for row in raw), dtype=np.uint64, count=len(raw)
    )
    return hashes.view(np.int64)


def check_row_overlap(
    train_hashes: np.ndarray,
    val_hashes: np.ndarray,
    *,
    train_rows: int | None = None,
    threshold: float = 0.0,
    unknown_size: bool = False,
) -> list[Violation]:
    """``train-val-overlap`` from hashes of sampled rows' inputs (for datamodules without key hashes).

    When ``train_hashes`` are a sample of a larger split, the share of validation rows with a twin
    is extrapolated (:class:`~lightning_order.checks.estimates.RateEstimate`) and raises only on
    at least :data:`~lightning_order.checks.estimates.MIN_HITS` twins with its whole interval
    above ``threshold``: a coincidental hit in a small sample is not multiplied into a leak.

    Args:
        train_hashes: :func:`row_hashes` of (a sample of) the train rows.
        val_hashes: the same for the validation rows.
        train_rows: the train split's full size, to say how much of it the sample covered.
        threshold: the largest extrapolated share that passes.
        unknown_size: the train rows are the first rows of a split of unknown size (an
            iterable dataset): a sample, never the whole split, so the share observed needs
            :data:`~lightning_order.checks.estimates.MIN_HITS` twins and its interval above
            ``threshold`` (more train rows could only add twins: the share is a lower bound).

    Returns:
        One violation, or nothing; nothing as well when the train rows repeat among themselves
        (inputs that repeat by nature are no leak).
    """
    train = np.asarray(train_hashes, dtype=np.int64).ravel()
    if train.size and 1.0 - np.unique(train).size / train.size > _NATURAL_REPEAT_RATE:
        return []
    found = check_key_overlap(
        train, val_hashes, max_rows=max(train.size, np.size(val_hashes), 1), source="inputs"
    )
    if not found or (not unknown_size and (train_rows is None or train_rows <= train.size)):
        return found
    v = found[0]
    coverage = 1.0 if unknown_size or not train_rows else train.size / train_rows
    estimate = RateEstimate(int(v.details["val_rows"]), int(np.size(val_hashes)), coverage=coverage)
    if not estimate.above(threshold):
        return []
    seen = (
        f"the first {train.size} rows of a train split of unknown size"
        if unknown_size
        else (f"{train.size} of {train_rows} train rows")
    )
    note = f" (the check saw {seen}: {estimate.describe('validation rows')})"
    details = {**v.details, "estimate": estimate.to_dict()}
    return [Violation(v.rule, v.steps, v.message + note, details=details)]

"""The float columns and labels of a split, for the label-encoding check: any datamodule, no glue.

Gathering only (the judgement is :func:`lightning_order.checks.label_encoding.check_label_encoded_features`).
Items are read from the dataset behind each dataloader (:mod:`.items`) by index, in chunks (``__getitems__``
where the dataset has it: Hugging Face datasets read a chunk in one call), collated with the
loader's collate function (a probe of 256 rows first: data with no label, or no small float
column whose values repeat, is left there, so images or token blocks cost 256 reads); every
floating-point leaf with at most 64 values per row becomes
columns, the ``label``/``labels``/``y``/``target`` leaf the labels. A split longer than
``max_rows`` is read through a seeded sample of rows (said in the verdict). Under DDP every
rank's arrays are gathered: shards that differ are joined into the whole split, datasets every
rank holds whole (a ``DistributedSampler`` pipeline) are kept once.

Registered as the ``label-encoding`` check (``setup``); ``SymptomMonitor`` runs it by that name
when no validator did.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from lightning_order.callbacks.validator.budget import item_size, rows_within
from lightning_order.callbacks.validator.evidence import (
    SPLIT_LOADERS,
    is_label,
    leaf_array,
    leaves,
    split_dataset,
)
from lightning_order.callbacks.validator.gather import all_gather
from lightning_order.callbacks.validator.peek import note_unread, untouched
from lightning_order.checks.label_encoding import check_label_encoded_features
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.rules import Violation

__all__ = [
    "join_rank_parts",
    "label_encoding_verdict",
    "read_split_columns",
]

log = logging.getLogger(__name__)

_CHUNK = 8192
_PROBE = 256
_MAX_WIDTH = 64


def _read(dataset: Any, indices: Sequence[int]) -> list[Any]:
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return list(getitems(list(indices)))
    return [dataset[int(i)] for i in indices]


def _columns(batch: Any, feature_names: Sequence[str] | None) -> tuple[list[np.ndarray], list[str], Any]:
    """The batch's float columns (each rows × k), their names, and its labels (``None``: no label leaf)."""
    columns, names, labels = [], [], None
    for path, leaf in leaves(batch):
        array = leaf_array(leaf)
        if array is None or array.ndim == 0:
            continue
        if is_label(path) and path.lower() != "key_hash":
            labels = array if array.ndim == 1 and labels is None else labels
            continue
        if not np.issubdtype(array.dtype, np.floating):
            continue
        flat = array.reshape(array.shape[0], -1)
        if flat.shape[1] > _MAX_WIDTH:
            continue
        columns.append(flat.astype(np.float32))
        if feature_names is not None and len(feature_names) == flat.shape[1] and path == "features":
            names += [f"features[{n}]" for n in feature_names]
        else:
            where = f"input {path}" if path.isdigit() else path
            names += [f"column {i} of {where}" for i in range(flat.shape[1])]
    return columns, names, labels


def read_split_columns(dm: Any, split: str, max_rows: int) -> tuple[str, dict[str, Any] | None]:
    """A split's float columns and labels (``None``: none), and why: ``"read"``; ``"no-candidate"`` (no float column, or none whose
    values repeat: no column can hold an encoding, which is a verdict); ``"unreadable"`` (no
    indexable dataset, no label, items that cannot be read or collated: no verdict)."""
    dataset, collate = split_dataset(dm, split)
    if dataset is None or len(dataset) == 0:
        return "unreadable", None
    with untouched(dataset) as blocked:  # an augmentation, a generator or a counter on the dataset: put back
        if blocked is not None:
            note_unread(dataset, blocked)
            return "unreadable", None
        return _read_columns(dm, dataset, collate, max_rows)


def _read_columns(dm: Any, dataset: Any, collate: Any, max_rows: int) -> tuple[str, dict[str, Any] | None]:
    length = len(dataset)
    sampled = length > max_rows
    indices = (
        np.sort(np.random.default_rng(2).choice(length, size=max_rows, replace=False))
        if sampled
        else np.arange(length)
    )
    feature_names = getattr(dm, "feature_names", None)
    feature_names = list(feature_names) if isinstance(feature_names, (list, tuple)) else None
    xs, ys, names = [], [], None
    # A small probe first: data without a label and a small float column whose values repeat
    # (images, token blocks, continuous features only) cannot hold an encoding; stop there.
    try:
        # Rows of 128k tokens read 8192 at a time would not fit in memory: chunks within the read budget.
        first = dataset[int(indices[0])]  # sizes the chunks, and is the probe's first row
        step = rows_within(item_size(first), _CHUNK)
        probe = min(_PROBE, step)
        bounds = [0, min(probe, len(indices)), *range(probe + step, len(indices), step), len(indices)]
        for start, stop in itertools.pairwise(bounds):
            if start >= stop:
                continue
            rest = _read(dataset, indices[max(start, 1) : stop].tolist())
            batch = collate([first, *rest] if start == 0 else rest)
            columns, chunk_names, labels = _columns(batch, feature_names)
            if labels is None or (columns and len(labels) != columns[0].shape[0]):
                return "unreadable", None
            if not columns:
                return "no-candidate", None
            x = np.concatenate(columns, axis=1)
            if start == 0 and not any(np.unique(c).size < len(c) for c in x.T):
                return "no-candidate", None
            xs.append(x)
            ys.append(np.asarray(labels))
            names = chunk_names
    except Exception as err:  # items that cannot be read or collated here: no label check
        log.debug("OrderValidator: no label-encoding check on %s (%s)", type(dataset).__name__, err)
        return "unreadable", None
    x, y = np.concatenate(xs), np.concatenate(ys)
    digest = xxhash.xxh3_64_hexdigest(np.ascontiguousarray(x).tobytes() + np.ascontiguousarray(y).tobytes())
    return "read", {"x": x, "y": y, "names": names, "length": length, "sampled": sampled, "digest": digest}


def join_rank_parts(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One split from every rank's :func:`read_split_columns`: the whole split once (every rank read the
    same rows), or the shards joined; ``None`` when a rank has none or the columns differ."""
    if not parts or any(p is None for p in parts):
        return None
    if len({p["digest"] for p in parts}) == 1:
        return parts[0]
    if len({tuple(p["names"]) for p in parts}) != 1:
        return None
    return {
        "x": np.concatenate([p["x"] for p in parts]),
        "y": np.concatenate([p["y"] for p in parts]),
        "names": parts[0]["names"],
        "sampled": any(p["sampled"] for p in parts),
    }


def label_encoding_verdict(trainer: Any, dm: Any, max_rows: int) -> tuple[bool, list[Violation]]:
    """``fit-before-split`` for label-encoded features fitted on train + validation (every rank
    alike), and whether the check gave a verdict.

    The verdict is given when every rank read both splits' float columns and they were judged,
    or when the data holds no column that could be an encoding (no float column, or none whose
    values repeat); not when a split could not be read or has no label.

    Collective under DDP: every rank must call it (one all-gather of the arrays).

    Returns:
        ``(checked, violations)``.
    """
    local = {
        split: read_split_columns(dm, split, max_rows) if dm is not None else ("unreadable", None)
        for split in SPLIT_LOADERS
    }
    gathered = all_gather(trainer, local)
    statuses = {status for g in gathered for status, _ in g.values()}
    if "unreadable" in statuses:
        return False, []
    if "no-candidate" in statuses:
        return True, []  # an encoding is a float column whose values repeat: there is none
    train = join_rank_parts([g["train"][1] for g in gathered])
    val = join_rank_parts([g["val"][1] for g in gathered])
    if train is None or val is None or train["names"] != val["names"]:
        return False, []
    return True, check_label_encoded_features(
        train["x"],
        train["y"],
        val["x"],
        val["y"],
        names=train["names"],
        source=f"the {type(dm).__name__} batches",
        sampled=bool(train["sampled"] or val["sampled"]),
    )


def _gather_labels(trainer: Any, evidence: CheckEvidence) -> tuple[bool, list[Violation]]:
    # Collective (every rank reads its splits, all-gathers them): identical verdicts everywhere.
    rows = int(evidence.settings.get("label_check_rows") or 0)
    return label_encoding_verdict(trainer, evidence.datamodule, rows) if rows else (False, [])


register_check(
    "label-encoding",
    lambda evidence: evidence.gathered[1],
    phase=Phase.SETUP,
    reads=[EvidenceKind.SAMPLES],
    rules=("fit-before-split",),
    gather=_gather_labels,
    order=30,
    facts=lambda gathered, _ranks: {"label_encoding": gathered[0]},
)

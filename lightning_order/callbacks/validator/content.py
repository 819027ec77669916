"""What a rank's datasets hold, summarised for the validator: any datamodule, no glue.

Gathering only (the judgements are :mod:`lightning_order.checks.datasets`). Items are read from
the dataset behind each dataloader by index, without workers (:mod:`.items`): every item when
the split is small (``whole_rows``), else the same seeded sample of indices on every rank (drawn
below the smallest length any rank has, so all ranks look at the same positions). Each item is hashed twice (its
non-float parts, which say which row it is; everything but its label, which says which input it
is), and the collated sample gives per-key statistics of every floating-point tensor and the
largest token id. Iterable datasets are not indexable: they are skipped (documented limit).

Reads are bounded by :mod:`.budget` as well as by row counts: a split is hashed whole only while
its items fit the whole-split budget (judged on the largest first item of any rank, so every rank
decides alike), items are read and hashed a chunk at a time, and only the rows the statistics need
are kept; all of it inside :func:`~.peek.untouched`, so reading leaves the dataset as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import xxhash

from lightning_order.callbacks.validator.batches import observed_dims, sample_batch
from lightning_order.callbacks.validator.budget import WHOLE_BYTES, WHOLE_TOKENS, item_size, rows_within
from lightning_order.callbacks.validator.evidence import (
    SPLIT_LOADERS,
    is_label,
    leaf_array,
    leaves,
    split_dataset,
)
from lightning_order.callbacks.validator.gather import all_gather
from lightning_order.callbacks.validator.peek import note_unread, untouched

__all__ = [
    "ITEM_HASH_SCHEME",
    "dataset_lengths",
    "first_item_sizes",
    "datamodule_settings",
    "hash_items",
    "item_hashes",
    "sampled_evidence",
    "summarize_splits",
]

log = logging.getLogger(__name__)

#: The scheme of :func:`hash_items` (2: an item of arrays hashes alike alone or in a chunk, #48),
#: stored with a checkpoint's content sample so that hashes of another scheme are not compared.
ITEM_HASH_SCHEME = 2


def dataset_lengths(dm: Any) -> dict[str, int | None]:
    """``{"train": n, "val": m}`` (``None`` where a split has no indexable dataset)."""
    out: dict[str, int | None] = {}
    for split in SPLIT_LOADERS:
        dataset, _ = split_dataset(dm, split) if dm is not None else (None, None)
        out[split] = None if dataset is None else len(dataset)
    return out


def _feed(hasher: Any, path: str, value: Any) -> None:
    array = _row_array(value)
    if array is not None:
        # An array's bytes alone, as a stacked chunk hashes its row (:func:`_hash_stacked`): an
        # item hashes alike whichever path its chunk takes (ragged rows of litgpt's SFTDataset
        # take this one, a chunk of one or of equal lengths the stacked one; #48).
        hasher.update(np.ascontiguousarray(array).view(np.uint8).tobytes())
        return
    hasher.update(path.encode())
    if isinstance(value, (bytes, bytearray)):
        hasher.update(bytes(value))
    else:
        hasher.update(repr(value).encode())


def _row_array(value: Any) -> np.ndarray | None:
    """A leaf as the array ``default_collate`` makes of it row by row: tensors and arrays as they
    are, Python numbers as int64 / float64 / bool (``None``: text, lists, anything else)."""
    array = leaf_array(value)
    if array is not None:
        return array
    if isinstance(value, (bool, int, float, np.number)):
        return np.asarray(value, dtype=np.float64 if isinstance(value, float) else None)
    return None


def _is_float(value: Any) -> bool:
    array = leaf_array(value)
    return isinstance(value, float) or (array is not None and np.issubdtype(array.dtype, np.floating))


def item_hashes(item: Any) -> tuple[int | None, int, int | None]:
    """``(rows, inputs, max_token_id)`` for one item.

    ``rows`` hashes the non-float leaves (labels included), ``None`` when there are none but the
    label; ``inputs`` hashes every leaf but the label and a row's token counts; ``max_token_id`` is the largest value of an
    integer array leaf that is not the label (``None`` when there is none).
    """
    rows, inputs = xxhash.xxh3_64(), xxhash.xxh3_64()
    has_row_part, max_id = False, None
    for path, leaf in leaves(item):
        label = is_label(path)
        if not label and not _is_tally(path):
            _feed(inputs, path, leaf)
        if not _is_float(leaf):
            _feed(rows, path, leaf)
            has_row_part = has_row_part or not label
        array = leaf_array(leaf)
        if not label and array is not None and array.size and np.issubdtype(array.dtype, np.integer):
            if array.ndim >= 1 and _looks_like_ids(path):
                max_id = max(int(array.max()), max_id if max_id is not None else -1)
    signed = np.array([rows.intdigest(), inputs.intdigest()], dtype=np.uint64).view(np.int64)
    return (int(signed[0]) if has_row_part else None), int(signed[1]), max_id


_CHUNK = 4096


def hash_items(items: list[Any]) -> list[tuple[int | None, int, int | None]]:
    """:func:`item_hashes` of many items; a vectorised path for items of fixed-shape tensors.

    Items that ``default_collate`` stacks into arrays (dicts or tuples of fixed-shape tensors and
    numbers) are hashed one byte row per item (a few microseconds each); anything else (text,
    ragged lists) item by item. The path depends only on the items' types, so every rank takes
    the same one for the same data.
    """
    out: list[tuple[int | None, int, int | None]] = []
    for start in range(0, len(items), _CHUNK):
        chunk = items[start : start + _CHUNK]
        out += _hash_stacked(chunk) or [item_hashes(item) for item in chunk]
    return out


def _hash_stacked(items: list[Any]) -> list[tuple[int | None, int, int | None]] | None:
    try:
        stacked = leaves(torch.utils.data.default_collate(items))
    except Exception:  # ragged or not collatable: the item-by-item path
        return None
    rows_parts, input_parts, has_row_part, max_id = [], [], False, None
    for path, leaf in stacked:
        array = leaf_array(leaf)
        if array is None or array.ndim == 0 or array.shape[0] != len(items):
            return None
        flat = np.ascontiguousarray(array.reshape(len(items), -1)).view(np.uint8).reshape(len(items), -1)
        label, is_float = is_label(path), np.issubdtype(array.dtype, np.floating)
        if not label and not _is_tally(path):
            input_parts.append(flat)
        if not is_float:
            rows_parts.append(flat)
            has_row_part = has_row_part or not label
        if not label and np.issubdtype(array.dtype, np.integer) and array.ndim >= 2 and _looks_like_ids(path):
            max_id = max(int(array.max()), max_id if max_id is not None else -1)
    if not input_parts:
        return None
    rows = np.concatenate(rows_parts, axis=1) if rows_parts else None
    inputs = np.concatenate(input_parts, axis=1)
    digest = xxhash.xxh3_64_intdigest
    input_hashes = np.fromiter((digest(r.tobytes()) for r in inputs), np.uint64, len(items)).view(np.int64)
    if has_row_part and rows is not None:
        row_hashes = np.fromiter((digest(r.tobytes()) for r in rows), np.uint64, len(items)).view(np.int64)
    else:
        row_hashes = [None] * len(items)
    item_max = None
    if max_id is not None:
        item_max = max_id  # the chunk's largest id: only the maximum over all items is used
    return [(None if r is None else int(r), int(i), item_max) for r, i in zip(row_hashes, input_hashes)]


# Words of a key that holds no token id although it names "token" or "id": positions, masks, a
# row's counts and lengths (litgpt's token_counts, #48), segment and document ids, token types.
_NOT_IDS = (
    "mask",
    "position",
    "count",
    "len",
    "num",
    "size",
    "offset",
    "type",
    "segment",
    "doc_id",
    "document_id",
)


def _is_tally(path: str) -> bool:
    """Whether a leaf counts a row's tokens (litgpt's ``token_counts``): no input of the model, and
    a count of the untruncated text, so rows cut to the same tokens would hash apart (#48)."""
    return "token_count" in path.lower()


def _looks_like_ids(path: str) -> bool:
    """Whether a leaf's key names token ids (``input_ids``, ``tokens``, ``idx``, a tuple's first
    element), never a count, length, position or other id that enters no token embedding."""
    name = path.lower()
    if name.isdigit():
        return True
    return ("id" in name or "token" in name) and not any(word in name for word in _NOT_IDS)


def _float_stats(batch: Any) -> dict[str, dict[str, Any]]:
    """Per-column mean and std of every floating-point tensor of a collated batch, by key."""
    out: dict[str, dict[str, Any]] = {}
    for path, leaf in leaves(batch):
        array = leaf_array(leaf)
        if array is None or not np.issubdtype(array.dtype, np.floating) or array.ndim == 0 or not len(array):
            continue
        flat = array.reshape(array.shape[0], -1).astype(np.float64)
        if flat.shape[1] > 64:  # images, embeddings: one pooled column
            flat = flat.reshape(-1, 1)
        out[path] = {"mean": flat.mean(0).tolist(), "std": flat.std(0).tolist(), "rows": int(array.shape[0])}
    return out


def _batch_max_id(batch: Any) -> int | None:
    best = None
    for path, leaf in leaves(batch):
        array = leaf_array(leaf)
        if is_label(path) or array is None or array.ndim < 2 or not array.size:
            continue
        if np.issubdtype(array.dtype, np.integer) and _looks_like_ids(path):
            best = max(int(array.max()), best if best is not None else -1)
    return best


def _summarize(
    dataset: Any, collate: Any, common_length: int, sample_rows: int, whole_rows: int, item: tuple[int, int]
) -> dict:
    """One split's summary; ``item``: the ``(bytes, tokens)`` of the largest first item of any rank."""
    length = len(dataset)
    fits = rows_within(item, length, WHOLE_BYTES, WHOLE_TOKENS) >= length
    whole = length <= whole_rows and length == common_length and fits
    if whole:
        indices = np.arange(length)
    else:
        size = min(sample_rows, common_length)
        indices = np.sort(np.random.default_rng(0).choice(common_length, size=size, replace=False))
    # Only the rows the statistics read are kept; the others are hashed a chunk at a time and dropped.
    keep = rows_within(item, sample_rows)
    kept_at = set(range(len(indices)) if len(indices) <= keep else _spread(len(indices), keep))
    chunk = rows_within(item, len(indices))
    hashed: list[tuple[int | None, int, int | None]] = []
    picked: list[Any] = []
    shapes: dict[str, list[int]] = {}
    for start in range(0, len(indices), chunk):
        items = [dataset[int(i)] for i in indices[start : start + chunk]]
        hashed += hash_items(items)
        picked += [x for n, x in enumerate(items, start) if n in kept_at]
        shapes = shapes or _shapes(items[0])
        del items
    rows = [h[0] for h in hashed]
    summary: dict[str, Any] = {
        "length": length,
        "whole": bool(whole),
        "ids": None if any(r is None for r in rows) else rows,
        "inputs": [h[1] for h in hashed],
        "max_token_id": max((h[2] for h in hashed if h[2] is not None), default=None),
        "random": bool(hashed) and hash_items([dataset[int(indices[0])]])[0][1] != hashed[0][1],
        "floats": {},
        "shapes": shapes,
    }
    try:
        batch = collate(picked) if picked else None
    except Exception as err:  # a collate that needs a worker or a tokenizer not ready: hashes only
        log.debug("OrderValidator: could not collate a sample (%s)", err)
        batch = None
    if batch is not None:
        summary["floats"] = _float_stats(batch)
        batch_max = _batch_max_id(batch)
        if batch_max is not None:
            summary["max_token_id"] = max(batch_max, summary["max_token_id"] or -1)
    return summary


def _shapes(item: Any) -> dict[str, list[int]]:
    """The shape of each array leaf of one item (a block size that differs per rank shows here)."""
    out = {}
    for path, leaf in leaves(item):
        array = leaf_array(leaf)
        if array is not None:
            out[path] = list(array.shape)
    return out


def datamodule_settings(dm: Any) -> dict[str, Any]:
    """The datamodule's numeric settings (public int, float and bool attributes, and hparams).

    Compared across ranks: a setting such as ``block_size`` that differs on one rank is named by
    its attribute. Names holding ``rank`` or ``device`` differ per rank by design and are left out.
    """
    found = dict(getattr(dm, "hparams", None) or {})
    found.update(vars(dm) if dm is not None and hasattr(dm, "__dict__") else {})
    return {
        name: value
        for name, value in found.items()
        if isinstance(name, str)
        and not name.startswith("_")
        and "rank" not in name
        and "device" not in name
        and isinstance(value, (bool, int, float))
    }


def _largest(sizes: list[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The largest ``(bytes, tokens)`` of the ranks' first items; ``None`` when a rank has none."""
    if any(s is None for s in sizes) or not sizes:
        return None
    return max(int(s[0]) for s in sizes if s), max(int(s[1]) for s in sizes if s)


def _spread(n: int, k: int) -> list[int]:
    return np.sort(np.random.default_rng(1).choice(n, size=k, replace=False)).tolist()


def first_item_sizes(dm: Any) -> dict[str, tuple[int, int] | None]:
    """Per split, the ``(bytes, tokens)`` of its first item (:func:`~.budget.item_size`), ``None`` when unread.

    Gathered across ranks with the lengths, so that every rank sizes its reads alike.
    """
    out: dict[str, tuple[int, int] | None] = {}
    for split in SPLIT_LOADERS:
        dataset, _ = split_dataset(dm, split) if dm is not None else (None, None)
        out[split] = None
        if dataset is None or not len(dataset):
            continue
        with untouched(dataset) as blocked:
            if blocked is not None:
                note_unread(dataset, blocked)
                continue
            try:
                out[split] = item_size(dataset[0])
            except Exception as err:  # an item that cannot be read by index: no content checks
                log.debug("OrderValidator: could not read %s's first item (%s)", split, err)
    return out


def summarize_splits(
    dm: Any,
    common: Mapping[str, int | None],
    *,
    sample_rows: int,
    whole_rows: int,
    items: Mapping[str, tuple[int, int] | None] | None = None,
) -> dict[str, dict[str, Any] | None]:
    """Each split's summary (see :mod:`lightning_order.checks.datasets`), ``None`` where unreadable.

    Args:
        dm: the datamodule (its dataloaders give the datasets and collate functions).
        common: per split, the smallest length any rank has (``None``: some rank lacks the split).
        sample_rows: items read per split when it is not hashed whole.
        whole_rows: splits up to this length are hashed whole (and within the whole-split budget).
        items: per split, the ``(bytes, tokens)`` of the largest first item any rank holds
            (:func:`first_item_sizes`; this rank's first item when not given).
    """
    out: dict[str, dict[str, Any] | None] = {}
    for split in SPLIT_LOADERS:
        dataset, collate = split_dataset(dm, split) if dm is not None else (None, None)
        out[split] = None
        if dataset is None or not common.get(split) or (items is not None and items.get(split) is None):
            continue
        try:
            with untouched(dataset) as blocked:
                if blocked is not None:
                    note_unread(dataset, blocked)
                    continue
                # One process (no sizes gathered): this rank's first item sizes its reads.
                item = items[split] if items is not None else item_size(dataset[0])
                out[split] = _summarize(dataset, collate, int(common[split]), sample_rows, whole_rows, item)
        except Exception as err:  # an item that cannot be read by index: no content checks
            log.debug("OrderValidator: could not summarise %s (%s)", split, err)
            out[split] = None
    return out


def sampled_evidence(
    trainer: Any, dm: Any, *, plain: bool, dims: Mapping[str, Any], sample_rows: int, whole_rows: int
) -> tuple[tuple[Any, int | None], dict[str, Any], dict[str, Any]]:
    """What the validator reads off a datamodule's data when it has no fingerprints and dims (``plain``).

    Collective when ``plain`` (every rank gathers its dataset lengths, so all read the same indices).

    Returns:
        ``(train_sample, observed, content)``: up to ``4 * sample_rows`` train rows and the train
        size (:func:`~lightning_order.callbacks.validator.batches.sample_batch`), the dims they show
        (empty when ``dims`` is known) and :func:`summarize_splits` of both splits.
    """
    if not plain:
        return (None, None), {}, {}
    train_sample = sample_batch(dm, "train_dataloader", 4 * sample_rows)
    observed = {} if dims else observed_dims(train_sample[0])
    gathered = all_gather(trainer, {"lengths": dataset_lengths(dm), "items": first_item_sizes(dm)})
    common = {s: min((g["lengths"][s] or 0) for g in gathered) or None for s in ("train", "val")}
    # The largest first item of any rank sizes every rank's reads: all ranks read the same rows.
    items = {s: _largest([g["items"][s] for g in gathered]) for s in ("train", "val")}
    content = summarize_splits(dm, common, sample_rows=sample_rows, whole_rows=whole_rows, items=items)
    seen = [c["max_token_id"] for c in content.values() if c and c.get("max_token_id") is not None]
    content["settings"] = datamodule_settings(dm)  # compared across ranks (rank-mismatch names the field)
    if seen and not dims:
        observed["max_token_id"] = max([*seen, observed.get("max_token_id", -1)])
    return train_sample, observed, content

"""What the splits and the ranks hold, by content: item hashes, what each rank reads, rows served twice, label columns.

The content identity of a run's data, for any datamodule with no glue: items hashed the same way
everywhere (:func:`hash_items`), summarised per split and compared across ranks, the rows each
rank will read first, the rows the train loader's workers serve, and the label columns a
target encoding could have leaked. Each part gathers for its own registered check.

**What a rank's datasets hold**, summarised for the validator: any datamodule, no glue.

Gathering only (the judgements are :mod:`lightning_order.checks.datasets`). Items are read from
the dataset behind each dataloader by index, without workers (:mod:`.reading`): every item when
the split is small (``whole_rows``), else the same seeded sample of indices on every rank (drawn
below the smallest length any rank has, so all ranks look at the same positions). Each item is hashed twice (its
non-float parts, which say which row it is; everything but its label, which says which input it
is), and the collated sample gives per-key statistics of every floating-point tensor and the
largest token id. Iterable datasets are not indexable: they are skipped (documented limit).

Reads are bounded by :mod:`.reading` as well as by row counts: a split is hashed whole only while
its items fit the whole-split budget (judged on the largest first item of any rank, so every rank
decides alike), items are read and hashed a chunk at a time, and only the rows the statistics need
are kept; all of it inside :func:`~.reading.untouched`, so reading leaves the dataset as it was.

**What each rank reads.** What each rank will read in its first epoch, gathered before step 1 (``ranks-read-same-data``).

Read off the train loader Lightning itself will iterate (``trainer.train_dataloader`` in
``on_train_start``: its sampler is the one Lightning injected, or the user's own, or none with
``use_distributed_sampler=False``), without drawing a batch from it (:mod:`.reading`):

- a map-style loader: the indices its sampler (or batch sampler) yields this epoch, as a bitmap
  over the first :data:`MAX_INDICES` indices of the dataset, an identity of the dataset (its
  length and the hashes of a few items at fixed indices: the indices compare only over the same
  data), and the hashes of the rows of its first batches;
- an iterable loader: the hashes of the rows of its first batches.

The judgement is :func:`lightning_order.checks.rank_data.check_rank_reads`, registered here as the
``ranks-read-same-data`` check (``train-start``, every rank's summary gathered by the phase). Iterating a sampler
costs what one epoch's index list costs (Lightning's ``DistributedSampler`` builds it anyway);
above :data:`MAX_DATASET` items only the first batches are compared.

**Rows the train loader's workers serve twice.** What the real train loader serves with its workers, read on a copy before step 1 (``rows-served-twice``).

Gathering only (the judgement is :mod:`lightning_order.checks.served_twice`). Read in
``on_train_start`` off the loader Lightning will iterate (``trainer.train_dataloader``), only when
it reads an ``IterableDataset`` with two loader workers or more: a map-style dataset's rows are
dealt to the workers by the sampler (no worker can serve another's row), and with one worker or
none there is no second reader.

The copy: a new ``DataLoader`` over the same dataset, with the same batch size, collate function,
``num_workers``, ``worker_init_fn`` and multiprocessing context, its collate function wrapped to
tag each batch with the worker that made it, never persistent. Its workers start from the dataset
as the run holds it (forked or pickled) and are shut down when the read ends: the run's own
loader, its iterator and its persistent workers are not touched, the random states the copy
draws from are put back (:func:`~.reading.untouched`; the loader's own generator is cloned), and the
dataset in this process is never iterated by the copy. Then as many rows are read without
workers (:func:`~.reading.peek_batches`, in this process, put back): the dataset's own repeat rate.

Bounded: :data:`SERVED_ROWS` rows (and at least two batches per worker, so every worker is read),
or :data:`~.reading.READ_BYTES` / :data:`~.reading.READ_TOKENS` of batches, whichever comes first;
each batch is hashed and dropped as it arrives. The cost is starting the workers once (a fork per
worker) and their first batches.

**Label columns.** The float columns and labels of a split, for the label-encoding check: any datamodule, no glue.

Gathering only (the judgement is :func:`lightning_order.checks.label_encoding.check_label_encoded_features`).
Items are read from the dataset behind each dataloader (:mod:`.reading`) by index, in chunks (``__getitems__``
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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import xxhash
from torch.utils.data import BatchSampler

from lightning_order.callbacks.validator.phases import agree, all_gather, rank_identity
from lightning_order.callbacks.validator.reading import (
    READ_BYTES,
    READ_TOKENS,
    SPLIT_LOADERS,
    WHOLE_BYTES,
    WHOLE_TOKENS,
    is_label,
    item_size,
    leaf_array,
    leaves,
    note_unread,
    observed_dims,
    peek_batches,
    readable,
    rows_within,
    sample_batch,
    split_dataset,
    train_loader,
    untouched,
)
from lightning_order.checks.label_encoding import check_label_encoded_features
from lightning_order.checks.rank_data import check_rank_reads
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.checks.served_twice import check_served_twice, served_rows
from lightning_order.rules import Violation

__all__ = [
    "ITEM_HASH_SCHEME",
    "MAX_DATASET",
    "MAX_INDICES",
    "SERVED_ROWS",
    "WORKER_TIMEOUT",
    "batch_row_hashes",
    "datamodule_settings",
    "dataset_lengths",
    "first_item_sizes",
    "hash_items",
    "item_hashes",
    "join_rank_parts",
    "label_encoding_verdict",
    "rank_reads",
    "read_served",
    "read_split_columns",
    "rows_served_twice",
    "sampled_evidence",
    "served_twice",
    "summarize_splits",
]

log = logging.getLogger(__name__)


# == What a rank's datasets hold ===================================================================
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
    """Per split, the ``(bytes, tokens)`` of its first item (:func:`~.reading.item_size`), ``None`` when unread.

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
        size (:func:`~lightning_order.callbacks.validator.reading.sample_batch`), the dims they show
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


# == What each rank reads ==========================================================================
#: Rows of the first batches hashed per rank.
FIRST_ROWS = 64
#: The bitmap of indices read covers the dataset's first this-many indices.
MAX_INDICES = 1 << 22
#: Larger map-style datasets are compared by their first batches only (no sampler walk).
MAX_DATASET = 1 << 24
#: Items hashed for a dataset's identity.
_IDENTITY_ITEMS = 8


def _epoch_indices(loader: Any) -> np.ndarray | None:
    """The indices the loader's sampler yields this epoch, in order, or ``None`` (not readable).

    Walked on a copy (:func:`~.reading.readable`: a resumable sampler moves its position when
    iterated) with the random states put back. A custom batch sampler is walked itself.
    """
    batches = loader.batch_sampler
    source = batches if batches is not None and not isinstance(batches, BatchSampler) else loader.sampler
    with untouched(loader, source) as blocked:
        twin = readable(source) if blocked is None else None
        if twin is None:
            return None
        if source is loader.sampler:  # one index at a time: read straight into an array (millions)
            return np.fromiter((int(i) for i in twin), dtype=np.int64)
        return np.asarray([int(i) for drawn in twin for i in drawn], dtype=np.int64)


def _identity(dataset: Any) -> str:
    length = len(dataset)
    picked = np.unique(np.random.default_rng(0).integers(0, length, size=min(_IDENTITY_ITEMS, length)))
    hashed = hash_items([dataset[int(i)] for i in picked])
    return xxhash.xxh3_64_hexdigest(repr((length, [h[1] for h in hashed])).encode())


def _row_hashes(batch: Any) -> list[int]:
    """One hash per row of a collated batch (every tensor leaf's row; rows counted by the first)."""
    arrays = [a for a in (leaf_array(leaf) for _, leaf in leaves(batch)) if a is not None and a.ndim]
    if not arrays:
        return []
    count = arrays[0].shape[0]
    parts = [np.ascontiguousarray(a.reshape(count, -1)).view(np.uint8).reshape(count, -1) for a in arrays]
    rows = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return [xxhash.xxh3_64_intdigest(r.tobytes()) for r in rows]


def _map_style(loader: Any) -> dict[str, Any]:
    dataset = loader.dataset
    length = len(dataset)
    if not length or length > MAX_DATASET:
        return {}
    with untouched(loader) as blocked:  # reading items may draw random numbers (augmentation)
        if blocked is not None:
            note_unread(dataset, blocked)
            return {}
        order = _epoch_indices(loader)
        if order is None:
            return {}
        first = [h[1] for h in hash_items([dataset[int(i)] for i in order[:FIRST_ROWS]])]
        identity = _identity(dataset)
    space = min(length, MAX_INDICES)
    read = np.zeros(space, dtype=bool)
    read[order[(order >= 0) & (order < space)]] = True
    return {
        "first": first,
        "reads": {
            "dataset": identity,
            "space": space,
            "bitmap": np.packbits(read).tobytes(),
            # A sampler that draws an index twice in one rank's epoch draws with replacement (a weighted
            # mixture, WeightedRandomSampler): the ranks' overlap is then no evidence of a missing split.
            "repeats": int(len(order) - len(np.unique(order))),
        },
    }


def rank_reads(loader: Any, identity: Mapping[str, Any]) -> dict[str, Any]:
    """This rank's summary for :func:`~lightning_order.checks.rank_data.check_rank_reads`.

    Args:
        loader: the train loader the loop will iterate (``None``: nothing to read).
        identity: this rank's :func:`~lightning_order.callbacks.validator.phases.rank_identity`.
    """
    summary: dict[str, Any] = dict(identity)
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        return summary
    try:
        if not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__len__"):
            summary.update(_map_style(loader))
        else:
            summary["first"] = [h for b in peek_batches(loader, FIRST_ROWS) for h in _row_hashes(b)][
                :FIRST_ROWS
            ]
    except Exception as err:  # a sampler or dataset that cannot be read here: no evidence from this rank
        log.debug("OrderValidator: could not read what this rank trains on (%s)", err)
    return summary


def _gather_rank_reads(trainer: Any, evidence: CheckEvidence) -> dict[str, Any] | None:
    if evidence.world_size < 2:  # nothing to compare in one process
        return None
    return rank_reads(train_loader(trainer), rank_identity(trainer))


def _judge_rank_reads(evidence: CheckEvidence) -> list[Violation]:
    return check_rank_reads(list(evidence.ranks)) if evidence.world_size > 1 else []


register_check(
    "ranks-read-same-data",
    _judge_rank_reads,
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.RANKS],
    rules=("ranks-read-same-data",),
    gather=_gather_rank_reads,
    order=20,
)


# == Rows the train loader's workers serve twice ===================================================
#: Rows of the first batches read with the workers (and again without them).
SERVED_ROWS = 256
#: Seconds the copy waits for a worker's batch when the loader sets no timeout of its own.
WORKER_TIMEOUT = 120.0


def batch_row_hashes(batch: Any) -> list[int]:
    """One hash per row of a collated batch: every array leaf's row (rows counted by the first leaf)."""
    arrays = [a for a in (leaf_array(leaf) for _, leaf in leaves(batch)) if a is not None and a.ndim]
    if not arrays:
        return []
    count = arrays[0].shape[0]
    arrays = [a for a in arrays if a.shape[0] == count]
    parts = [np.ascontiguousarray(a.reshape(count, -1)).view(np.uint8).reshape(count, -1) for a in arrays]
    rows = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return [xxhash.xxh3_64_intdigest(r.tobytes()) for r in rows]


class _Tagged:
    """The loader's collate function, returning ``(worker id, batch)``: which worker made each batch.

    A module-level class, so a loader whose workers are spawned can pickle it (with the collate
    function it wraps).
    """

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, items: Any) -> tuple[int, Any]:
        info = torch.utils.data.get_worker_info()
        return (-1 if info is None else int(info.id)), self.collate(items)


def _copy(loader: torch.utils.data.DataLoader) -> torch.utils.data.DataLoader:
    """A loader like ``loader`` (dataset, batching, workers), tagging batches, never persistent."""
    generator = None
    if loader.generator is not None:  # drawing the workers' base seed must not move the run's generator
        generator = torch.Generator().set_state(loader.generator.get_state())
    options: dict[str, Any] = {}
    if loader.num_workers and loader.prefetch_factor is not None:
        options["prefetch_factor"] = loader.prefetch_factor
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        drop_last=loader.drop_last,
        collate_fn=_Tagged(loader.collate_fn),
        num_workers=loader.num_workers,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=generator,
        timeout=loader.timeout or WORKER_TIMEOUT,
        persistent_workers=False,
        **options,
    )


def read_served(loader: torch.utils.data.DataLoader, rows: int = SERVED_ROWS) -> list[tuple[int, int]]:
    """``(worker id, row hash)`` of the first rows a copy of ``loader`` serves with its workers.

    Args:
        loader: the run's train loader (not iterated: a copy is).
        rows: rows to read at most (whole batches), at least two batches per worker.
    """
    copy = _copy(loader)
    served: list[tuple[int, int]] = []
    batches, held, tokens = 0, 0, 0
    with untouched(loader):  # the global generators the copy's seeds are drawn from are put back
        batch_iter = iter(copy)
        try:
            for worker, batch in batch_iter:
                served += [(worker, h) for h in batch_row_hashes(batch)]
                size = item_size(batch)
                batches, held, tokens = batches + 1, held + size[0], tokens + size[1]
                del batch
                every_worker = batches >= 2 * loader.num_workers
                if every_worker and (len(served) >= rows or held >= READ_BYTES or tokens >= READ_TOKENS):
                    break
        finally:
            del batch_iter  # its workers are shut down here
    return served


def served_twice(loader: Any) -> tuple[list[Violation], list[Violation]]:
    """``(proven, suspected)`` ``rows-served-twice`` violations of this rank's train loader.

    Not collective: each rank reads its own loader; the caller agrees the verdicts across ranks.

    Args:
        loader: the train loader the loop will iterate (``None``: nothing to read).
    """
    dataset = getattr(loader, "dataset", None)
    if loader is None or not isinstance(dataset, torch.utils.data.IterableDataset) or loader.num_workers < 2:
        return [], []
    try:
        served = read_served(loader)
        own = [h for b in peek_batches(loader, max(1, len(served))) for h in batch_row_hashes(b)][
            : len(served)
        ]
    except Exception as err:  # workers that cannot start or read here: no evidence, the run goes on
        log.debug("OrderValidator: could not read the train loader with its workers (%s)", err)
        return [], []
    if not served or not own:
        return [], []
    return check_served_twice(served_rows(served, own, loader.num_workers))


def rows_served_twice(trainer: Any) -> tuple[list[Violation], list[Violation]]:
    """``(proven, suspected)`` from every rank's :func:`served_twice`, identical on every rank.

    Collective under DDP (every rank must call it).
    """
    proven, suspected = served_twice(train_loader(trainer))
    gathered = all_gather(trainer, ([v.to_dict() for v in proven], [v.to_dict() for v in suspected]))
    return agree([g[0] for g in gathered]), agree([g[1] for g in gathered])


def _gather_served(trainer: Any, evidence: Any) -> dict[str, list[dict[str, Any]]]:
    proven, suspected = served_twice(train_loader(trainer))
    return {"proven": [v.to_dict() for v in proven], "suspected": [v.to_dict() for v in suspected]}


# At train start, once the train loader (and its workers' settings) is final; every rank's reading
# is judged alike (a duplicating loader on one rank stops every rank), suspicions warn.
register_check(
    "rows-served-twice",
    lambda evidence: agree([rank["proven"] for rank in evidence.ranks]),
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.RANKS],
    rules=["rows-served-twice"],
    gather=_gather_served,
    order=30,
    facts=lambda _own, ranks: {"rows_served_suspected": agree([rank["suspected"] for rank in ranks])},
)


# == Label columns =================================================================================
_COLUMN_CHUNK = 8192
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
        step = rows_within(item_size(first), _COLUMN_CHUNK)
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

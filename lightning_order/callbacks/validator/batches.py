"""Batches sampled from a datamodule's dataloaders, and what the validator reads off them.

Gathering only, over duck-typed objects (any datamodule, any batch layout: a dict with
``input_ids`` / ``features`` / ``labels``, or a tuple whose last element is the label); the
judgements are in :mod:`lightning_order.checks`. A sample is drawn with a fixed seed, so every
rank reads the same rows of the same data.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.budget import item_size, rows_within
from lightning_order.callbacks.validator.evidence import KEY_HASH
from lightning_order.callbacks.validator.peek import note_unread, peek_batches, untouched

__all__ = ["as_numpy", "batch_field", "batch_inputs", "observed_dims", "sample_batch"]

log = logging.getLogger(__name__)


def sample_batch(dm: Any, loader_name: str, rows: int) -> tuple[Any, int | None]:
    """Up to ``rows`` rows of a datamodule's dataloader, collated as one batch, and the dataset size.

    Map-style datasets are indexed directly (a fixed seed, so every rank samples the same rows of
    the same data) without starting workers; iterable ones yield their first batches, read without
    consuming the stream (:func:`~lightning_order.callbacks.validator.peek.peek_batches`). Both
    are read inside :func:`~lightning_order.callbacks.validator.peek.untouched` and bounded by
    the budgets of :mod:`~lightning_order.callbacks.validator.budget` too: ``rows`` of 128k
    tokens are cut to what fits (at least one).

    Args:
        dm: the datamodule.
        loader_name: ``"train_dataloader"`` or ``"val_dataloader"``.
        rows: rows to read at most.

    Returns:
        ``(batch, size)``: ``(None, None)`` when there is nothing to read; ``size`` is ``None``
        for an iterable dataset.
    """
    try:
        loader = getattr(dm, loader_name)()
    except Exception as err:  # a datamodule without that split, or not ready: nothing to sample
        log.debug("OrderValidator: no %s to sample (%s)", loader_name, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if loader is None or dataset is None:
        return None, None
    collate = getattr(loader, "collate_fn", None) or torch.utils.data.default_collate
    if not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__len__"):
        size = len(dataset)
        if size == 0:
            return None, 0
        getitems = getattr(dataset, "__getitems__", None)
        with untouched(
            loader
        ) as blocked:  # an augmentation, a generator or a counter on the dataset: put back
            if blocked is not None:
                note_unread(dataset, blocked)
                return None, size
            # The first row sampled sizes the read: rows bounded by tokens and bytes as well.
            first = int(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False).min())
            rows = rows_within(item_size(dataset[first]), rows)
            picked = np.sort(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False))
            items = getitems(picked.tolist()) if callable(getitems) else [dataset[int(i)] for i in picked]
        return collate(items), size
    # Read without consuming: the run must start on the batch it would have started on without us.
    batches = peek_batches(loader, rows)
    return (_concat(batches) if batches else None), None


def batch_field(batch: Any, key: str) -> Any:
    """``batch[key]`` of a dict batch; of a tuple, the last element as ``"labels"``, the first as
    ``"features"`` (floating point) or ``"input_ids"`` (integer). ``None`` when there is none."""
    if isinstance(batch, Mapping):
        return batch.get(key)
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        first = batch[0]
        if key == "labels":
            return batch[-1]
        is_float = torch.is_tensor(first) and first.is_floating_point()
        if key == "features" and is_float:
            return first
        if key == "input_ids" and torch.is_tensor(first) and not is_float:
            return first
    return None


def _concat(batches: list[Any]) -> Any:
    """Batches of one structure joined along rows, however nested (torchtitan's ``({"input": x}, y)``);
    what is not a tensor is left out of a mapping and kept as the first batch's in a tuple."""
    first = batches[0]
    if torch.is_tensor(first):
        return torch.cat(batches) if first.ndim else first
    if isinstance(first, Mapping):
        return {k: _concat([b[k] for b in batches]) for k in first if _has_tensor(first[k])}
    if isinstance(first, (list, tuple)):
        return type(first)(_concat([b[i] for b in batches]) for i in range(len(first)))
    return first


def _has_tensor(value: Any) -> bool:
    if torch.is_tensor(value):
        return True
    if isinstance(value, Mapping):
        return any(_has_tensor(v) for v in value.values())
    return isinstance(value, (list, tuple)) and any(_has_tensor(v) for v in value)


def as_numpy(value: Any) -> np.ndarray | None:
    """A tensor (on any device) or array-like as a numpy array; ``None`` stays ``None``."""
    if value is None:
        return None
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def batch_inputs(batch: Any) -> list[np.ndarray]:
    """The model inputs of a batch (everything but the labels and key hashes), as numpy arrays."""
    if batch is None:
        return []
    if isinstance(batch, Mapping):
        keys = [k for k in sorted(batch) if k not in ("labels", "label", "y", KEY_HASH)]
        return [a for a in (as_numpy(batch[k]) for k in keys) if a is not None and a.ndim >= 1]
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return [a for a in (as_numpy(x) for x in batch[:-1]) if a is not None and a.ndim >= 1]
    return []


def observed_dims(batch: Any) -> dict[str, Any]:
    """What a sampled batch shows about the data's dims (lower bounds): ``max_token_id``,
    ``num_features`` (the width of ``features``), ``max_label``."""
    observed: dict[str, Any] = {}
    ids = as_numpy(batch_field(batch, "input_ids"))
    if ids is not None and ids.size and np.issubdtype(ids.dtype, np.integer):
        observed["max_token_id"] = int(ids.max())
    features = as_numpy(batch_field(batch, "features"))
    if features is not None and features.ndim == 2:
        observed["num_features"] = int(features.shape[1])
    labels = as_numpy(batch_field(batch, "labels"))
    if labels is not None and labels.size and np.issubdtype(labels.dtype, np.integer) and labels.ndim == 1:
        observed["max_label"] = int(labels.max())
    return observed

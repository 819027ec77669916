"""The items behind a datamodule's dataloaders: each split's dataset, and an item's leaves by path.

Shared by the content summary (:mod:`lightning_order.callbacks.validator.content`) and the label-encoding
reader (:mod:`lightning_order.callbacks.validator.labels`), so both read the same items the same way. Only
map-style datasets are read (by index, without workers); an iterable dataset is not indexable
and is skipped (documented limit).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["SPLIT_LOADERS", "is_label", "leaf_array", "leaves", "split_dataset"]

log = logging.getLogger(__name__)

#: The splits read, and the dataloader method of each.
SPLIT_LOADERS = {"train": "train_dataloader", "val": "val_dataloader"}
_LABEL_KEYS = frozenset({"label", "labels", "y", "target", "targets", "key_hash"})


def split_dataset(dm: Any, split: str) -> tuple[Any, Any]:
    """The map-style dataset behind a split's dataloader and its collate function, or ``(None, None)``."""
    try:
        loader = getattr(dm, SPLIT_LOADERS[split])()
    except Exception as err:  # no such split, or not set up: nothing to read
        log.debug("OrderValidator: no %s dataset (%s)", split, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if (
        dataset is None
        or isinstance(dataset, torch.utils.data.IterableDataset)
        or not hasattr(dataset, "__len__")
    ):
        return None, None
    return dataset, getattr(loader, "collate_fn", None) or torch.utils.data.default_collate


def leaves(item: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs of an item: dict keys sorted; in a tuple, the last element is the label."""
    if isinstance(item, Mapping):
        return [pair for key in sorted(item, key=str) for pair in leaves(item[key], f"{path}{key}")]
    if isinstance(item, (list, tuple)) and not path and len(item) >= 2:
        return [pair for i, x in enumerate(item[:-1]) for pair in leaves(x, f"{i}")] + [("label", item[-1])]
    return [(path or "0", item)]


def is_label(path: str) -> bool:
    """Whether a leaf's path names the label (or the key hash, which is no input either)."""
    return path.lower() in _LABEL_KEYS


def leaf_array(value: Any) -> np.ndarray | None:
    """A tensor or array leaf as a numpy array; ``None`` for anything else (text, numbers)."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    return None

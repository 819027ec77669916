"""The content sample a checkpoint stores for a datamodule with no ledger, and reading it back.

Gathering only (the judgement is :func:`lightning_order.checks.resume_content.check_resume_content`).
Items are read by index from the map-style dataset behind each split's dataloader (:mod:`.items`)
at fixed indices, hashed as the rank comparisons hash them
(:func:`~lightning_order.callbacks.validator.content.hash_items`), inside
:func:`~lightning_order.callbacks.validator.peek.untouched` (an item may draw random numbers or
count its reads). An iterable split cannot be read at fixed indices: it is left
out (the tokenizer is still compared).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lightning_order.callbacks.validator.budget import item_size, rows_within
from lightning_order.callbacks.validator.content import hash_items
from lightning_order.callbacks.validator.gather import all_gather
from lightning_order.callbacks.validator.items import SPLIT_LOADERS, split_dataset
from lightning_order.callbacks.validator.peek import note_unread, untouched
from lightning_order.checks.resume_content import sample_indices
from lightning_order.parallelism import data_parallel

__all__ = ["content_sample", "stored_content"]

log = logging.getLogger(__name__)


def _split_sample(dm: Any, split: str) -> dict[str, Any] | None:
    dataset, _ = split_dataset(dm, split)
    if dataset is None or not len(dataset):
        return None
    try:
        with untouched(dataset) as blocked:
            if blocked is not None:
                note_unread(dataset, blocked)
                return None
            hashes = _hashes(dataset, sample_indices(len(dataset)))
    except Exception as err:  # an item that cannot be read by index: the split is left out
        log.debug("OrderValidator: could not sample %s for the checkpoint (%s)", split, err)
        return None
    return {"length": len(dataset), "hashes": hashes}


def _hashes(dataset: Any, indices: list[int]) -> list[int]:
    """The inputs hashes of ``dataset``'s items at ``indices``, read a chunk within the read budget at a time."""
    chunk = rows_within(item_size(dataset[indices[0]]), len(indices)) if indices else 1
    hashes: list[int] = []
    for start in range(0, len(indices), chunk):
        hashes += [h[1] for h in hash_items([dataset[i] for i in indices[start : start + chunk]])]
    return hashes


def content_sample(trainer: Any, dm: Any, tokenizer: str | None) -> dict[str, Any]:
    """This rank's content sample (its keys: :mod:`lightning_order.checks.resume_content`).

    Collective under DDP (every rank must call it): the ranks compare their samples to tell one
    dataset on every rank from a shard per rank.

    Args:
        trainer: the Trainer (its rank and data-parallel position).
        dm: the datamodule.
        tokenizer: the fingerprint of the tokenizer in use, or ``None``.
    """
    splits = {s: sample for s in SPLIT_LOADERS if (sample := _split_sample(dm, s)) is not None}
    gathered = all_gather(trainer, splits)
    dp = data_parallel(trainer)
    return {
        "tokenizer": tokenizer,
        "splits": splits,
        "same_on_ranks": all(g == gathered[0] for g in gathered),
        "data_parallel": {"size": dp.size, "rank": dp.rank},
    }


def stored_content(checkpoint: Mapping[str, Any], state_key: str) -> dict[str, Any] | None:
    """The content sample a checkpoint's validator state holds, or ``None`` (none saved)."""
    state = (checkpoint.get("callbacks") or {}).get(state_key)
    content = state.get("content") if isinstance(state, Mapping) else None
    return dict(content) if isinstance(content, Mapping) and content else None

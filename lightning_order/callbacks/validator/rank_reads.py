"""What each rank will read in its first epoch, gathered before step 1 (``ranks-read-same-data``).

Read off the train loader Lightning itself will iterate (``trainer.train_dataloader`` in
``on_train_start``: its sampler is the one Lightning injected, or the user's own, or none with
``use_distributed_sampler=False``), without drawing a batch from it (:mod:`.peek`):

- a map-style loader: the indices its sampler (or batch sampler) yields this epoch, as a bitmap
  over the first :data:`MAX_INDICES` indices of the dataset, an identity of the dataset (its
  length and the hashes of a few items at fixed indices: the indices compare only over the same
  data), and the hashes of the rows of its first batches;
- an iterable loader: the hashes of the rows of its first batches.

The judgement is :func:`lightning_order.checks.rank_data.check_rank_reads`, registered here as the
``ranks-read-same-data`` check (``train-start``, every rank's summary gathered by the phase). Iterating a sampler
costs what one epoch's index list costs (Lightning's ``DistributedSampler`` builds it anyway);
above :data:`MAX_DATASET` items only the first batches are compared.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import xxhash
from torch.utils.data import BatchSampler

from lightning_order.callbacks.validator.content import hash_items
from lightning_order.callbacks.validator.evidence import leaf_array, leaves, train_loader
from lightning_order.callbacks.validator.gather import rank_identity
from lightning_order.callbacks.validator.peek import note_unread, peek_batches, readable, untouched
from lightning_order.checks.rank_data import check_rank_reads
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.rules import Violation

__all__ = ["MAX_DATASET", "MAX_INDICES", "rank_reads"]

log = logging.getLogger(__name__)

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

    Walked on a copy (:func:`~.peek.readable`: a resumable sampler moves its position when
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


def rank_reads(trainer: Any) -> dict[str, Any]:
    """This rank's summary for :func:`~lightning_order.checks.rank_data.check_rank_reads`."""
    summary: dict[str, Any] = rank_identity(trainer)
    loader = train_loader(trainer)
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
    return rank_reads(trainer) if evidence.world_size > 1 else None  # nothing to compare in one process


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

"""Reading a run's data without changing what the run trains on.

The validator looks at batches before step 1; the run must then start exactly where it would have
without the validator (issue #37, item 9). What reading can move, and how each is put back:

- random number generators: the global ones (``torch``, CUDA, ``numpy``, ``random``: a
  ``RandomSampler`` without a generator, nanoGPT's ``get_batch``) are restored afterwards
  (Lightning's ``isolate_rng``), and so is the ``torch.Generator`` a sampler holds;
- an iterable dataset with ``state_dict`` / ``load_state_dict`` (torchtitan's stateful
  streams, ``datasets``' ``IterableDataset``): its state is saved before reading and loaded back
  after;
- any other iterable dataset is read through a shallow copy whose lists, dicts and sets are
  copied too, so counters and buffers the dataset keeps on itself stay where they were; a
  sampler is walked the same way (a resumable sampler moves its position when iterated). One that
  is its own iterator, or keeps an open iterator on itself, cannot be read without consuming it:
  it is not read (the checks that need its batches are skipped, never the run's data).

The rule, for a hand-written stream: give it ``state_dict`` / ``load_state_dict``, or let
``iter()`` start from the state the dataset keeps in its attributes.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pytorch_lightning.utilities.seed import isolate_rng

__all__ = ["peek_batches", "readable", "untouched"]

log = logging.getLogger(__name__)

_CONTAINERS = (list, dict, set, bytearray)


def _generators(loader: Any) -> list[torch.Generator]:
    """The ``torch.Generator`` objects a loader's sampler, batch sampler and itself hold."""
    found: list[torch.Generator] = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
        for obj in (owner, getattr(owner, "sampler", None)):
            generator = getattr(obj, "generator", None)
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
                found.append(generator)
    return found


@contextmanager
def untouched(loader: Any, *others: Any) -> Iterator[None]:
    """Random states (global and the sampler's generators) and stateful objects' states, put back on exit.

    Args:
        loader: the dataloader about to be read (its ``dataset``, ``sampler``, ``batch_sampler``).
        *others: more objects about to be read (a sampler): their ``state_dict`` is loaded back.
    """
    saved = [(g, g.get_state()) for g in _generators(loader)]
    owners = [o for o in (getattr(loader, "dataset", None), *others) if _stateful(o)]
    states = [(o, copy.deepcopy(o.state_dict())) for o in owners]
    try:
        with isolate_rng():
            yield
    finally:
        for generator, generator_state in saved:
            generator.set_state(generator_state)
        for owner, state in states:
            owner.load_state_dict(state)


def _stateful(dataset: Any) -> bool:
    return callable(getattr(dataset, "state_dict", None)) and callable(
        getattr(dataset, "load_state_dict", None)
    )


def readable(iterable: Any) -> Any:
    """What to iterate instead of ``iterable`` (a dataset, a sampler) so that it does not advance.

    The object itself when it has ``state_dict`` / ``load_state_dict`` (read it inside
    :func:`untouched`, which loads its state back); else a shallow copy whose lists, dicts and
    sets are copied; ``None`` when it cannot be read without consuming it (its own iterator, or
    an open iterator kept on it).
    """
    if _stateful(iterable):
        return iterable
    if isinstance(iterable, Iterator):  # never iter() it to find out: that may move it already
        return None  # its own iterator: reading it is consuming it
    attributes = vars(iterable) if hasattr(iterable, "__dict__") else {}
    if any(isinstance(v, Iterator) for v in attributes.values()):
        return None  # an open iterator on itself: a copy would share and advance it
    twin = copy.copy(iterable)
    for name, value in attributes.items():
        if isinstance(value, _CONTAINERS):
            setattr(twin, name, copy.copy(value))
    return twin


def peek_batches(loader: Any, rows: int) -> list[Any]:
    """The first batches of an iterable-dataset loader, up to ``rows`` rows, without consuming it.

    Read in this process (no workers: the run's own workers are never started here), through
    :func:`readable`, inside :func:`untouched`.

    Args:
        loader: a ``DataLoader`` over an ``IterableDataset``.
        rows: rows to read at most (whole batches: the last one may go past it).

    Returns:
        The batches read, as the loader collates them; empty when the dataset cannot be read
        without consuming it.
    """
    dataset = getattr(loader, "dataset", None)
    batches: list[Any] = []
    with untouched(loader):
        twin = readable(dataset) if dataset is not None else None
        if twin is None:
            log.debug(
                "OrderValidator: %s cannot be read without consuming it: not sampled", type(dataset).__name__
            )
            return []
        reader = torch.utils.data.DataLoader(
            twin,
            batch_size=getattr(loader, "batch_size", None),
            collate_fn=getattr(loader, "collate_fn", None),
            drop_last=bool(getattr(loader, "drop_last", False)),
        )
        seen = 0
        for batch in reader:
            batches.append(batch)
            seen += _rows(batch)
            if seen >= rows:
                break
    return batches


def _rows(batch: Any) -> int:
    """How many rows a collated batch holds (its first tensor's length; 1 when it has none)."""
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for value in batch:
            if torch.is_tensor(value) and value.ndim:
                return int(value.shape[0])
    return int(batch.shape[0]) if torch.is_tensor(batch) and batch.ndim else 1

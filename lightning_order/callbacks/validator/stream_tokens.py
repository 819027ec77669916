"""A split's token ids read as one stream, up to a stated budget: the overlap check on iterable splits.

Gathering only (the judgement is :mod:`lightning_order.checks.windows`). An iterable split (a
torchtitan-style stateful stream, ``datasets``' streaming ``IterableDataset``, any hand-written
``IterableDataset``) has no index and no length: #37 hashed its first rows as a sample, which a
split after packing or a dedup after the split passes whatever its size. Here its items are read
in order on a copy (:func:`~.peek.readable` inside :func:`~.peek.untouched`: the run's stream,
its position and the random states are put back; no worker is started) until
:data:`~.budget.STREAM_TOKENS` token ids, and joined into the token stream they were cut from: a
window whose labels are its inputs shifted by one contributes its inputs and its last label (the
``block_size + 1`` tokens it was cut as), any other row its inputs. Validation windows are then
checked against every train token read (:func:`~lightning_order.checks.windows.window_overlap`).

What the read can prove: twin documents found are facts (every token of a validation document in
the train tokens read); their share of the validation windows is a lower bound of the true one
when the train stream was read only in part, and exact when it ended within the budget. What it
cannot: a twin whose train copy lies beyond the budget (a leak of share ``r`` shows as about
``r`` times the share of train read), and a split after packing of disjoint blocks (no validation
token is then in train; windows that overlap their neighbours by 16 tokens or more, nanoGPT's
every window, are found). Figures: docs/validator.md.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.budget import STREAM_TOKENS
from lightning_order.callbacks.validator.evidence import SPLIT_LOADERS, is_label, leaf_array, leaves
from lightning_order.callbacks.validator.peek import note_unread, readable, untouched

__all__ = ["StreamRead", "is_stream", "item_tokens", "read_split_tokens"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamRead:
    """A split's token ids as read.

    Attributes:
        tokens: the ids, joined in reading order (a 1-D int64 array).
        window: tokens per window (the rows' inputs plus the label's extra token), the longest row read.
        rows: rows read.
        whole: the split ended within the budget (every row was read).
    """

    tokens: np.ndarray
    window: int
    rows: int
    whole: bool


def _ids(value: Any) -> np.ndarray | None:
    """An integer array (or a list of ints, as ``datasets`` yields) as an int64 array of rows."""
    array = leaf_array(value)
    if (
        array is None
        and isinstance(value, (list, tuple))
        and value
        and isinstance(value[0], (int, np.integer))
    ):
        array = np.asarray(value)
    if (
        array is None
        or not array.size
        or not np.issubdtype(array.dtype, np.integer)
        or array.ndim not in (1, 2)
    ):
        return None
    return np.atleast_2d(array).astype(np.int64, copy=False)


def item_tokens(item: Any) -> list[np.ndarray]:
    """The windows an item (or a batch an iterable yields) holds, each as the tokens it was cut as.

    The input ids are the first integer leaf that is neither the label nor a mask; when the labels
    are the inputs shifted by one, each row gets its last label back (``x + y[-1:]``).
    """
    found = [(path, leaf) for path, leaf in leaves(item)]
    inputs = next(
        (
            ids
            for path, leaf in found
            if not is_label(path) and "mask" not in path.lower() and "position" not in path.lower()
            for ids in [_ids(leaf)]
            if ids is not None
        ),
        None,
    )
    if inputs is None:
        return []
    labels = next((_ids(leaf) for path, leaf in found if is_label(path) and _ids(leaf) is not None), None)
    shifted = (
        labels is not None
        and labels.shape == inputs.shape
        and inputs.shape[1] > 1
        and np.array_equal(labels[:, :-1], inputs[:, 1:])
    )
    if shifted and labels is not None:
        return list(np.concatenate([inputs, labels[:, -1:]], axis=1))
    return list(inputs)


#: Items stacked per conversion (``default_collate``): the per-item cost of a Python stream is paid once per group.
_GROUP = 512


def _rows_of(items: list[Any]) -> list[np.ndarray]:
    """:func:`item_tokens` of a group of items: stacked when they stack into one row each, else one by one."""
    try:
        rows = item_tokens(torch.utils.data.default_collate(items))
    except Exception:  # ragged rows, text, lists of different lengths: item by item
        rows = []
    if len(rows) != len(items):  # items that are batches already, or that did not stack
        rows = [row for item in items for row in item_tokens(item)]
    return rows


#: Marks the end of a stream (an item may be anything, ``None`` included).
_END = object()


def _from_rows(rows: Any, max_tokens: int) -> StreamRead | None:
    """Reads windows off an iterator of items until ``max_tokens``."""
    pieces: list[np.ndarray] = []
    count, tokens, window, whole = 0, 0, 0, True
    group: list[Any] = []
    for item in itertools.chain(rows, [_END]):
        if item is not _END:
            group.append(item)
            # The first item alone sizes the groups, so a group never reads far past the budget.
            wanted = 1 if not window else min(_GROUP, -(-(max_tokens - tokens) // window))
            if len(group) < max(1, wanted):
                continue
        for row in _rows_of(group) if group else []:
            pieces.append(row)
            count, tokens, window = count + 1, tokens + row.size, max(window, row.size)
        group = []
        if tokens >= max_tokens:
            whole = item is _END
            break
    if not pieces:
        return None
    return StreamRead(np.concatenate(pieces), window, count, whole)


def _loader(dm: Any, split: str) -> Any:
    try:
        loader = getattr(dm, SPLIT_LOADERS[split])()
    except Exception as err:  # no such split, or not set up: nothing to read
        log.debug("OrderValidator: no %s loader (%s)", split, err)
        return None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    return loader


def is_stream(dm: Any, split: str) -> bool:
    """Whether a split's loader reads an iterable dataset (no index, no length)."""
    dataset = getattr(_loader(dm, split), "dataset", None) if dm is not None else None
    return dataset is not None and (
        isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__")
    )


def read_split_tokens(dm: Any, split: str, max_tokens: int = STREAM_TOKENS) -> StreamRead | None:
    """A split's first ``max_tokens`` token ids (whole rows), read without moving the run's data.

    An iterable dataset is read on a copy in this process, items in order; a map-style one by
    index, from item 0. ``None`` when the split has no token ids, or cannot be read without being
    consumed (noted once, :func:`~.peek.note_unread`).

    Args:
        dm: the datamodule.
        split: ``"train"`` or ``"val"``.
        max_tokens: token ids read at most (the last row read may pass it).
    """
    loader = _loader(dm, split) if dm is not None else None
    dataset = getattr(loader, "dataset", None)
    if dataset is None:
        return None
    iterable = isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__")
    try:
        with untouched(dataset) as blocked:
            if blocked is not None:
                note_unread(dataset, blocked)
                return None
            if not iterable:
                return _from_rows((dataset[i] for i in range(len(dataset))), max_tokens)
            twin = readable(dataset)
            if twin is None:
                note_unread(dataset, "it cannot be read without consuming it")
                return None
            rows = iter(twin)
            try:
                return _from_rows(rows, max_tokens)
            finally:
                close = getattr(rows, "close", None)
                if callable(close):  # a generator is closed before the states are put back
                    close()
    except Exception as err:  # a stream that fails off its worker or device: no stream evidence
        log.debug("OrderValidator: could not read %s as a token stream (%s)", split, err)
        return None

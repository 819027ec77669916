"""Where documents start, end and how long they are, in sampled rows of token ids.

Two layouts: *padded* rows (one document per row, fine-tuning style: an attention mask with
zeros after, or before, the document) and *packed* blocks (documents concatenated and cut, their
boundaries the end-of-text ids, or the BOS ids of a BOS-first packing). A sample is read as
padded when at least half its rows hold padding, so the longest row of a padded sample (no
padding of its own) is read like the others. Pure numpy over ``B × T`` arrays; the judgements
using them are in :mod:`~lightning_order.checks.eos_labels`, :mod:`~lightning_order.checks.bos`
and :mod:`~lightning_order.checks.truncation`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "LENGTHS_PADDED_SHARE",
    "attended",
    "document_lengths",
    "document_starts",
    "is_padded",
    "joined_windows",
    "last_attended",
    "stream_document_lengths",
]


def attended(input_ids: np.ndarray, attention_mask: np.ndarray | None) -> np.ndarray:
    """The positions holding tokens (``attention_mask == 1``; every position with no mask)."""
    if attention_mask is None or attention_mask.shape != input_ids.shape:
        return np.ones(input_ids.shape, dtype=bool)
    return attention_mask.astype(bool)


#: The share of rows holding padding from which lengths are read per row: a padded sample whose long
#: documents were truncated to one width has few padded rows, and a packed sample at most a last block.
LENGTHS_PADDED_SHARE = 0.1


def is_padded(attention_mask: np.ndarray | None, share: float = 0.5) -> bool:
    """Whether the rows are padded documents: at least ``share`` of them hold a masked position."""
    if attention_mask is None or attention_mask.ndim != 2 or not attention_mask.size:
        return False
    return bool((attention_mask == 0).any(axis=1).mean() >= share)


def last_attended(mask: np.ndarray) -> np.ndarray:
    """Per row, the index of the last attended position (``-1`` for a row with none)."""
    width = mask.shape[1]
    flipped = np.argmax(mask[:, ::-1], axis=1)
    return np.where(mask.any(axis=1), width - 1 - flipped, -1)


def document_starts(
    input_ids: np.ndarray, attention_mask: np.ndarray | None, eos_id: int | None, bos_id: int | None
) -> list[tuple[int, int | None]]:
    """The first two tokens of every document start seen (the second ``None`` at a row's end).

    Padded rows: each row's first attended position. Packed blocks: the position after each
    end-of-text id, and each BOS id not preceded by one (a BOS-first packing), within the row.
    """
    mask = attended(input_ids, attention_mask)
    width = input_ids.shape[1]
    starts: list[tuple[int, int]] = []
    if is_padded(attention_mask):
        first = np.argmax(mask, axis=1)
        starts = [(r, int(c)) for r, c in enumerate(first) if mask[r, c]]
    else:
        at = np.zeros(input_ids.shape, dtype=bool)
        if eos_id is not None:
            at[:, 1:] |= (input_ids[:, :-1] == eos_id) & mask[:, :-1]
        if bos_id is not None:
            bos = (input_ids == bos_id) & mask
            at[:, 0] |= bos[:, 0]
            at[:, 1:] |= bos[:, 1:] & ~bos[:, :-1]
        at &= mask
        starts = [(int(r), int(c)) for r, c in zip(*np.nonzero(at))]
    return [
        (int(input_ids[r, c]), int(input_ids[r, c + 1]) if c + 1 < width and mask[r, c + 1] else None)
        for r, c in starts
    ]


def document_lengths(
    input_ids: np.ndarray, attention_mask: np.ndarray | None, eos_id: int | None
) -> np.ndarray:
    """The lengths of the documents seen whole, in tokens (end-of-text included).

    Padded rows (:data:`LENGTHS_PADDED_SHARE` of them holding padding): the attended positions of
    each row that ends with the end-of-text id (any row when it is unknown), so that a document
    chunked into rows is not read as documents of the chunk's width. Packed blocks: the spans
    between two consecutive end-of-text ids of one row (a document cut by the block's edge is not
    seen whole).
    """
    if is_padded(attention_mask, LENGTHS_PADDED_SHARE):
        mask = attended(input_ids, attention_mask)
        lengths: np.ndarray = mask.sum(axis=1)
        if eos_id is None:
            return lengths
        last = last_attended(mask)
        ends = input_ids[np.arange(len(last)), np.maximum(last, 0)] == eos_id
        whole: np.ndarray = lengths[ends & (last >= 0)]
        return whole
    if eos_id is None:
        return np.zeros(0, dtype=np.int64)
    mask = attended(input_ids, attention_mask)
    spans = [np.diff(np.flatnonzero((row == eos_id) & keep)) for row, keep in zip(input_ids, mask)]
    return np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)


def joined_windows(rows: np.ndarray) -> np.ndarray | None:
    """The token stream that consecutive windows (a ``N × W`` array, in index order) were cut from.

    The stride is read off the rows themselves: the smallest shift ``s`` (``1 <= s < W``) at which
    every window continues its predecessor (``rows[i + 1][:W - s] == rows[i][s:]``: nanoGPT's every
    window is ``s = 1``); when none holds, the windows are taken as disjoint (run_clm's
    ``group_texts`` blocks, ``s = W``). Disjoint windows that were not cut in order from one stream
    join into spans of no common length, which no length pile reads as truncation.

    Returns:
        The stream (1-D), or ``None`` for fewer than two windows or windows of one token.
    """
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[0] < 2 or rows.shape[1] < 2:
        return None
    width = rows.shape[1]
    first, second = rows[0], rows[1]
    for shift in range(1, width):
        if np.array_equal(second[: width - shift], first[shift:]) and np.array_equal(
            rows[1:, : width - shift], rows[:-1, shift:]
        ):
            return np.concatenate([rows[0], rows[1:, width - shift :].ravel()])
    return rows.ravel()


def stream_document_lengths(tokens: np.ndarray, eos_id: int) -> np.ndarray:
    """The lengths of the documents a token stream holds whole (between two end-of-text ids; the
    later one counted), in tokens."""
    ends = np.flatnonzero(np.asarray(tokens) == eos_id)
    return np.diff(ends)

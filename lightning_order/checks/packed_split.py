"""A split made after packing: train and validation windows cut from the same documents.

When both splits are subsets of one dataset of windows cut from one token stream (``random_split``
of nanoGPT-style windows, or of packed blocks), each window's place in the stream is known from
its index. A validation window whose neighbour (the next or previous window, or an overlapping
one) is a train window, with no document separator between them, comes from a document that is
on both sides of the split: the model trains on the text around every validation window, and
with overlapping windows on the very tokens. Exact for the train side (every train index is
known); the validation windows may be a uniform sample (a Wilson interval then applies).
Pure functions of arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lightning_order.checks.estimates import RateEstimate
from lightning_order.rules import Violation

__all__ = ["check_packed_split", "cut_windows"]


def cut_windows(
    stream: np.ndarray,
    train_starts: np.ndarray,
    val_starts: np.ndarray,
    window: int,
    stride: int,
    separators: Sequence[int] = (),
) -> np.ndarray:
    """Which validation windows share a document with a neighbouring train window.

    Args:
        stream: the token stream both splits' windows are cut from.
        train_starts: the stream offset of every train window.
        val_starts: the stream offsets of (a sample of) the validation windows.
        window: tokens per window.
        stride: tokens between the starts of consecutive windows of the stream (1: every
            window; ``window`` or ``window - 1``: packed blocks).
        separators: the ids that end or open each document; without, neighbours always share one.

    Returns:
        One boolean per validation window.
    """
    train = np.sort(np.asarray(train_starts, dtype=np.int64))
    val = np.asarray(val_starts, dtype=np.int64)
    if not train.size or not val.size:
        return np.zeros(val.size, dtype=bool)
    reach = max(window - 1, stride)  # windows this close overlap or touch
    at = np.searchsorted(train, val)
    before = train[np.maximum(at - 1, 0)]
    after = train[np.minimum(at, train.size - 1)]
    near_before = (at > 0) & (val - before <= reach)
    near_after = (at < train.size) & (after - val <= reach)
    # Windows sharing two tokens or more hold the same text: cut whatever the separators say.
    shared = (near_before & (val - before < window - 1)) | (near_after & (after - val < window - 1))
    if not separators:
        return np.asarray(near_before | near_after, dtype=bool)
    seps = np.asarray(separators, dtype=np.int64)
    return np.asarray(
        shared
        | (near_before & ~_separated(stream, before, val, window, seps))
        | (near_after & ~_separated(stream, val, after, window, seps))
    )


def _separated(
    stream: np.ndarray, first: np.ndarray, second: np.ndarray, window: int, seps: np.ndarray
) -> np.ndarray:
    """For each pair, whether a separator lies between the end of the document part of ``first`` and ``second``.

    Looks at the tokens from the last token of the earlier window to the first of the later one
    (or, when they overlap, at the overlap): a separator there means two documents.
    """
    lo = np.minimum(first + window - 1, second)
    hi = np.maximum(first + window - 1, second)
    width = int((hi - lo).max()) + 1 if lo.size else 1
    index = np.minimum(lo[:, None] + np.arange(width)[None, :], stream.size - 1)
    inside = np.arange(width)[None, :] <= (hi - lo)[:, None]
    separated: np.ndarray = (np.isin(np.asarray(stream)[index], seps) & inside).any(axis=1)
    return separated


def check_packed_split(
    cut: np.ndarray, *, whole: bool, threshold: float = 0.01, stride: int = 1, window: int = 0
) -> list[Violation]:
    """``train-val-overlap`` when more than ``threshold`` of the validation windows are cut from train documents.

    Args:
        cut: :func:`cut_windows` for the validation windows checked.
        whole: every validation window was checked (the count is exact), not a sample.
        threshold: the largest share that passes.
        stride: tokens between consecutive windows' starts, for the message.
        window: tokens per window, for the message.

    Returns:
        One violation with the count, the share and the fix; or nothing.
    """
    estimate = RateEstimate(int(np.sum(cut)), int(np.size(cut)), exact=whole)
    if not np.size(cut) or not estimate.above(threshold):
        return []
    kind = "overlapping windows" if stride < window - 1 else "packed blocks"
    return [
        Violation(
            "train-val-overlap",
            ("split",),
            f"both splits are subsets of one dataset of {kind} ({window} tokens, {stride} apart) cut from one "
            f"token stream, and {estimate.describe('validation windows')} have a train window next to them in "
            "the same document: the split was made after packing, so every such document is on both sides",
            fix="split the documents first (by a hash of the cleaned text), then tokenize and pack each split "
            "into its own stream (train.bin, val.bin); never random_split the windows or blocks of one stream",
            details={
                "cut": estimate.hits,
                "checked": estimate.n,
                "stride": stride,
                "window": window,
                "estimate": estimate.to_dict(),
            },
        )
    ]

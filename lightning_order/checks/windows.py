"""Train/validation overlap of packed token data, from a full pass over the train tokens.

The question: which validation windows have an identical train window *because a document is on
both sides* (no dedup before the split, or a split made after packing), not because two
distinct documents share a phrase. A full pass answers it without sampling:

1. every validation n-gram (:data:`NGRAM` consecutive tokens) is hashed (:func:`ngram_hashes`,
   a polynomial hash built by doubling: ``log2(n)`` vectorised passes);
2. the train tokens are hashed the same way chunk by chunk, and every train n-gram is looked up
   among the validation ones (a bit table, then an exact search on the few candidates):
   memory is the validation side plus one chunk, never the train split;
3. a validation token is *covered* when a validation n-gram holding it occurs in train; a
   validation window counts as a twin when it lies inside a validation document whose every
   token is covered (:func:`window_overlap`; documents are the spans between the tokenizer's
   end-of-text or BOS ids, or the rare id that closes most matches). Without any separator, a
   covered run of two windows or more stands for a document.

4. a validation stream whose first (or last) tokens are the train stream's last (or first) ones, a
   run of :data:`NGRAM` tokens or more, is a slice that overlaps train at the cut (nanoGPT's
   ``val = data[n - k:]`` beside ``train = data[:n]``): every window inside that run is a twin,
   whole documents or not (:func:`edge_overlap`). Only documents were counted before, so an
   overlap of four blocks was found in 6 of 8 document orders (in the other two, the shared
   tokens held no whole document); the run is compared token by token with train's own edge,
   so a shared header or footer, which never *is* train's edge, stays out.

Why whole documents and not identical windows: a twin document is covered from separator to
separator; a phrase shared by distinct documents (a footer, a licence, a quotation) is matched
from somewhere inside one document, and may be longer than a window (tests/nanogpt.py's
footers are ~80 tokens, windows 33: 13 % of the validation windows of a correct pipeline had an
identical train window). The n-gram length (16 tokens) decides what a match is made of: 16
consecutive tokens shared by chance are rare in prose (0 of ~5 600 validation 9-grams matched
in tests/nanogpt.py's corpus of 360 documents). Not caught this way: documents packed without
any separator (``pack-without-eos`` is its own rule), and a twin document shorter than one
window (it gives no identical window either).

Every count here is exact (hash collisions aside: 64-bit hashes); no confidence interval
applies. Pure functions of arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from lightning_order.checks.estimates import RateEstimate
from lightning_order.rules import Violation

__all__ = [
    "NGRAM",
    "WindowOverlap",
    "check_window_overlap",
    "edge_overlap",
    "find_ngrams",
    "ngram_hashes",
    "window_overlap",
]

#: Tokens per n-gram: long enough that distinct documents rarely share one by chance.
NGRAM = 16
#: An odd multiplier (invertible modulo 2**64) for the polynomial hash.
_P = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)


def _mixed(tokens: np.ndarray) -> np.ndarray:
    """Token ids spread over 64 bits, so small ids do not give small, colliding sums."""
    t = np.asarray(tokens).astype(np.uint64)
    t += np.uint64(1)
    t *= _MIX
    t ^= t >> np.uint64(31)
    return t


def ngram_hashes(tokens: np.ndarray, n: int = NGRAM) -> np.ndarray:
    """A uint64 hash of every ``n`` consecutive tokens (``len(tokens) - n + 1`` of them).

    The polynomial hash ``sum_k m(t[i+k]) * P**(n-1-k)`` modulo ``2**64``, built by doubling
    (``h_2k[i] = h_k[i] * P**k + h_k[i+k]``): ``log2(n)`` passes over the array.

    Args:
        tokens: a 1-D array of token ids.
        n: tokens per n-gram, a power of two.

    Returns:
        The hashes, empty when there are fewer than ``n`` tokens.
    """
    if n & (n - 1):
        raise ValueError(f"ngram_hashes: n must be a power of two, got {n}")
    h = _mixed(tokens)
    if h.size < n:
        return np.empty(0, dtype=np.uint64)
    k, power = 1, _P
    with np.errstate(over="ignore"):
        while k < n:
            h = h[:-k] * power + h[k:]
            power = power * power
            k *= 2
    return h


def find_ngrams(val_hashes: np.ndarray, train_chunks: Iterable[np.ndarray], n: int = NGRAM) -> np.ndarray:
    """Which validation n-grams occur anywhere in the train tokens.

    Args:
        val_hashes: :func:`ngram_hashes` of the validation tokens.
        train_chunks: the train tokens in consecutive pieces (a piece boundary loses no n-gram:
            the last ``n - 1`` tokens carry over).
        n: the n-gram length used for ``val_hashes``.

    Returns:
        A boolean array aligned with ``val_hashes``.
    """
    wanted = np.unique(val_hashes)
    found = np.zeros(wanted.size, dtype=bool)
    if not wanted.size:
        return np.zeros(val_hashes.size, dtype=bool)
    # A bit table on the top bits rejects almost every train n-gram with one gather.
    bits = int(min(27, max(16, np.ceil(np.log2(wanted.size)) + 4)))  # a table of 128 MiB at most
    shift = np.uint64(64 - bits)
    table = np.zeros(1 << bits, dtype=bool)
    table[wanted >> shift] = True
    carry = np.empty(0, dtype=np.int64)
    for chunk in train_chunks:
        tokens = np.concatenate([carry, np.asarray(chunk).astype(np.int64, copy=False)])
        carry = tokens[-(n - 1) :] if n > 1 else tokens[:0]
        h = ngram_hashes(tokens, n)
        candidates = h[table[h >> shift]]
        if candidates.size:
            at = np.searchsorted(wanted, candidates)
            at[at == wanted.size] = 0
            found[at[wanted[at] == candidates]] = True
    return found[np.searchsorted(wanted, val_hashes)]


def _covered(found: np.ndarray, length: int, n: int) -> np.ndarray:
    """Tokens inside at least one found n-gram."""
    marks = np.zeros(length + 1, dtype=np.int64)
    starts = np.flatnonzero(found)
    np.add.at(marks, starts, 1)
    np.add.at(marks, starts + n, -1)
    return np.cumsum(marks[:-1]) > 0


def _inferred_separator(
    tokens: np.ndarray, covered: np.ndarray, window: int, tail: int = 8
) -> tuple[int, ...]:
    """The end-of-text id, read off the data when no tokenizer names it.

    A twin document's match ends at its end-of-text token, and so does a footer's (give or take
    the next document's first tokens, which train often holds after the same footer too): when
    one rare id (under 2 % of the tokens) is among the last ``tail`` tokens of most covered runs
    of a window or more, it is the separator. Phrases shared in the middle of documents end
    anywhere: no id is inferred.
    """
    edges = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
    starts, ends = edges[::2], edges[1::2]
    ends = ends[(ends - starts) >= window]
    if ends.size < 2:
        return ()
    tail = min(tail, window)
    last = tokens[ends[:, None] - 1 - np.arange(tail)[None, :]]  # runs are at least a window long
    pairs = np.unique(np.stack([np.repeat(np.arange(ends.size), tail), last.ravel()]), axis=1)
    ids, counts = np.unique(pairs[1], return_counts=True)
    best = int(ids[np.argmax(counts)])
    if counts.max() * 2 < ends.size or np.count_nonzero(tokens == best) > 0.02 * tokens.size:
        return ()
    return (best,)


def _twins(
    tokens: np.ndarray,
    covered: np.ndarray,
    window: int,
    separators: tuple[int, ...],
    edges: tuple[int, int] = (0, 0),
) -> tuple[np.ndarray, int]:
    """Which stride-1 windows lie inside twin documents (one boolean per window start), and the longest
    twin document (or run); ``edges``: the spans :func:`edge_overlap` found shared at the cut."""
    length = covered.size
    if length < window:
        return np.zeros(0, dtype=bool), 0
    separators = separators or _inferred_separator(tokens, covered, window)
    is_sep = np.isin(tokens, np.asarray(separators, dtype=np.int64)) if separators else None
    if is_sep is not None and is_sep.any():
        # Documents: spans between separators; a separator counts as covered, being shared by all.
        doc: np.ndarray = np.cumsum(is_sep) - is_sep  # a separator belongs to the document it closes
        uncovered = np.bincount(doc, weights=~(covered | is_sep), minlength=int(doc[-1]) + 1)
        sizes = np.bincount(doc, minlength=int(doc[-1]) + 1)
        twin_doc = (uncovered == 0) & (sizes > 1)
        inside = twin_doc[doc]
        longest = int(sizes[twin_doc].max()) if twin_doc.any() else 0
    else:
        flips = np.flatnonzero(np.diff(np.r_[0, covered.astype(np.int8), 0]))
        starts, ends = flips[::2], flips[1::2]
        keep = (ends - starts) >= 2 * window
        longest = int((ends - starts)[keep].max()) if keep.any() else 0
        marks = np.zeros(length + 1, dtype=np.int64)
        np.add.at(marks, starts[keep], 1)
        np.add.at(marks, ends[keep], -1)
        inside = np.cumsum(marks[:-1]) > 0
    # A slice shared with train at the cut: its windows are twins, whole documents or not.
    inside = inside.copy()
    inside[: edges[0]] = True
    if edges[1]:
        inside[length - edges[1] :] = True
    full = np.convolve(inside.astype(np.int64), np.ones(window, dtype=np.int64), mode="valid")
    return full == window, max(longest, *edges)


def edge_overlap(val: np.ndarray, head: np.ndarray, tail: np.ndarray, n: int = NGRAM) -> tuple[int, int]:
    """How many tokens a validation slice shares with train at the cut, token for token.

    Args:
        val: the validation tokens.
        head: the train stream's first tokens (at least as many as the overlap to find).
        tail: the train stream's last tokens.
        n: the shortest overlap counted.

    Returns:
        ``(start, end)``: the longest ``k`` with ``val[:k] == tail[-k:]``, and the longest ``k``
        with ``val[-k:] == head[:k]``; ``0`` where there is none of at least ``n`` tokens.
    """
    val, head, tail = (np.asarray(a, dtype=np.int64) for a in (val, head, tail))
    if val.size < n:
        return 0, 0
    start = 0
    if tail.size >= n:
        # Where val's first n-gram occurs in train's tail; the earliest match that runs to the end is the longest.
        for at in np.flatnonzero(ngram_hashes(tail, n) == ngram_hashes(val[:n], n)[0]):
            k = tail.size - int(at)
            if k <= val.size and np.array_equal(tail[at:], val[:k]):
                start = k
                break
    end = 0
    if head.size >= n:
        hits = np.flatnonzero(ngram_hashes(val, n) == ngram_hashes(head[:n], n)[0])
        for at in hits:
            k = val.size - int(at)
            if k <= head.size and np.array_equal(val[at:], head[:k]):
                end = k
                break
    return start, end


def window_overlap(
    val_tokens: np.ndarray,
    train_chunks: Iterable[np.ndarray],
    window: int,
    separators: Iterable[int] = (),
    n: int = NGRAM,
) -> WindowOverlap:
    """The full pass: every stride-1 validation window of ``window`` tokens against all train tokens.

    Args:
        val_tokens: the validation split's tokens, in order (a 1-D array).
        train_chunks: the train split's tokens in consecutive pieces (see :func:`find_ngrams`).
        window: tokens per window (``block_size + 1``).
        separators: the ids that end or open each document (see :func:`window_overlap`).
        n: the n-gram length.

    Returns:
        The counts (:class:`WindowOverlap`).
    """
    val = np.asarray(val_tokens)
    counted = _Counted(train_chunks, keep=val.size)
    found = find_ngrams(ngram_hashes(val, n), counted, n)
    edges = edge_overlap(val, counted.head, counted.tail, n)
    twins, longest = _twins(val, _covered(found, val.size, n), window, tuple(separators), edges)
    return WindowOverlap(int(twins.sum()), int(twins.size), window, counted.tokens, longest, max(edges))


class _Counted:
    """Passes chunks through, counts their tokens, and keeps the first and last ``keep`` of them."""

    def __init__(self, chunks: Iterable[np.ndarray], keep: int = 0) -> None:
        self.chunks, self.tokens, self.keep = chunks, 0, keep
        self.head = self.tail = np.empty(0, dtype=np.int64)

    def __iter__(self):  # type: ignore[no-untyped-def]
        for chunk in self.chunks:
            self.tokens += len(chunk)
            piece = np.asarray(chunk)
            if self.head.size < self.keep:
                self.head = np.concatenate([self.head, piece[: self.keep - self.head.size]])
            self.tail = np.concatenate([self.tail, piece])[-self.keep :] if self.keep else self.tail
            yield chunk


@dataclass(frozen=True)
class WindowOverlap:
    """What a full pass found: validation windows inside documents that are in both splits.

    Attributes:
        twins: validation windows inside a whole validation document that train holds too.
        windows: validation windows checked (every one: exact).
        window: tokens per window.
        train_tokens: train tokens hashed (all of them).
        longest: the longest such document, in tokens.
        edge: the tokens a validation slice shares with train at the cut (:func:`edge_overlap`).
    """

    twins: int
    windows: int
    window: int
    train_tokens: int
    longest: int = 0
    edge: int = 0

    @property
    def rate(self) -> float:
        """Share of validation windows that are twins."""
        return self.twins / self.windows if self.windows else 0.0


def check_window_overlap(
    result: WindowOverlap, *, threshold: float = 0.01, train_whole: bool = True
) -> list[Violation]:
    """``train-val-overlap`` when more than ``threshold`` of the validation windows are twins.

    Args:
        result: the full pass's counts (see :class:`WindowOverlap`).
        threshold: the largest share that passes.
        train_whole: the train tokens were all of train; else the first ones of a stream, and the
            share found is a lower bound of the true one (a twin beyond them is not seen).

    Returns:
        One violation naming the count, the share, the rule used, and the fix; or nothing.
    """
    # Exact counts: over part of a train stream they can only grow with more of it read.
    estimate = RateEstimate(result.twins, max(result.windows, result.twins), exact=True)
    if not result.windows or not estimate.above(threshold):
        return []
    return [
        Violation(
            "train-val-overlap",
            ("split",),
            f"{result.twins} of {result.windows} validation windows ({result.rate:.1%}, every window checked "
            + (
                f"against all {result.train_tokens} train tokens"
                if train_whole
                else f"against the first {result.train_tokens} train tokens of the stream: a lower bound"
            )
            + ") lie inside whole documents that the train split "
            f"holds too (every token covered, separator to separator; windows of {result.window} tokens, the longest "
            f"such document {result.longest} tokens)"
            + (
                f", or inside the {result.edge} tokens the validation slice shares with train at the cut"
                if result.edge
                else ""
            )
            + f", above the threshold of {threshold:.1%}: the same documents are on both "
            "sides of the split (no dedup before it, a split made after packing, or slices that overlap)",
            fix="deduplicate documents before the split, split documents (by a hash of the cleaned text) and "
            "only then tokenize and pack each split; state the share you accept with "
            "OrderValidator(overlap_threshold=...)",
            details={
                "twins": result.twins,
                "checked": result.windows,
                "rate": result.rate,
                "threshold": threshold,
                "window": result.window,
                "edge": result.edge,
                "train_whole": train_whole,
                "estimate": estimate.to_dict(),
            },
        )
    ]

"""Deduplication of documents: exact duplicates, then MinHash + LSH near-duplicates.

The ``dedup`` step of the LM pipeline runs this on the whole cleaned corpus *before* the split, so
no near-duplicate can land on both sides of it; :func:`straddling_pairs` is the check that proves
it afterwards (the validator's ``dedup-after-split``).

Definitions (one place, used by every function here):

- A document's *words* are the whitespace-separated tokens of its lower-cased text; its
  *normalised text* is those words joined by single spaces.
- *Exact duplicates* have the same normalised text (compared by a 128-bit xxh3 hash); the first
  occurrence is kept.
- *Near-duplicates* have a Jaccard similarity of their sets of word ``ngram``-grams at or above
  ``threshold``. Candidates come from MinHash signatures banded for LSH (rensa, in Rust); every
  candidate pair is then confirmed by its *exact* Jaccard, so nothing is removed on an estimate.
  A document is removed when it is a near-duplicate of an earlier document that was kept (no
  transitive chains: a document is never removed for resembling a removed one).
- Documents with fewer than ``ngram`` words have no n-grams: they are deduplicated exactly only.

Speed: the work is vectorised. Arrow dictionary-encodes the words and each distinct one is hashed
once (xxh3), the n-gram hashes of the whole corpus are combined in numpy in one pass, rensa
computes every signature from that flat buffer and flags the rows that share an LSH band with
another row; only those rows are banded in Python and compared (its speed is measured by
``benchmarks/bench_lm_prepare.py``, see benchmarks/README.md). The LSH band count is the
largest number of rows per band (dividing ``num_perm``) that still finds a pair at exactly the
threshold with probability ≥ 0.99, so misses are rare and extra candidates cost only an exact
comparison.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import rensa
import xxhash

from lightning_order.errors import DataError

__all__ = ["DedupResult", "deduplicate", "jaccard", "straddling_pairs", "word_ngrams"]

_STEP = "dedup"
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier (golden ratio) for the n-gram combine


@dataclass(frozen=True)
class DedupResult:
    """What :func:`deduplicate` kept and removed.

    Attributes:
        keep: ascending int64 indices (into the input) of the documents kept.
        exact_removed: documents removed as exact duplicates (same normalised text).
        near_removed: documents removed as near-duplicates (exact n-gram Jaccard ≥ threshold).
        short_documents: documents with fewer than ``ngram`` words (deduplicated exactly only).
    """

    keep: np.ndarray
    exact_removed: int
    near_removed: int
    short_documents: int = 0


def _words(text: str) -> list[str]:
    return text.lower().split()


def word_ngrams(text: str, n: int = 5) -> set[str]:
    """The set of word ``n``-grams of ``text`` (lower-cased, whitespace-split, joined by spaces).

    Args:
        text: the document.
        n: words per n-gram.

    Returns:
        The n-grams; empty when ``text`` has fewer than ``n`` words.
    """
    words = _words(text)
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """The Jaccard similarity ``|a ∩ b| / |a ∪ b|`` of two sets; 0.0 when both are empty."""
    if not a and not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def _check_params(threshold: float, ngram: int, num_perm: int) -> None:
    if not isinstance(threshold, (int, float)) or not 0.0 < float(threshold) <= 1.0:
        raise DataError(
            f"expected a Jaccard threshold in (0, 1], got {threshold!r}; 0.8 (the default) removes "
            "documents that share 80 % of their word n-grams",
            step=_STEP,
        )
    if not isinstance(ngram, int) or isinstance(ngram, bool) or ngram < 1:
        raise DataError(f"expected ngram to be an integer >= 1, got {ngram!r}; 5 is the default", step=_STEP)
    if not isinstance(num_perm, int) or isinstance(num_perm, bool) or num_perm < 2:
        raise DataError(
            f"expected num_perm to be an integer >= 2, got {num_perm!r}; 128 is the default", step=_STEP
        )


def _bands(threshold: float, num_perm: int) -> int:
    """The LSH band count: most rows per band with P(candidate | J = threshold) ≥ 0.99."""
    best = num_perm  # one row per band: the widest net
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= 0.99:
            best = bands
    return best


class _Shingles:
    """Hashed word n-grams of many documents in one flat buffer (``row_offsets`` per document)."""

    def __init__(self, word_lists: Sequence[list[str]], ngram: int) -> None:
        lengths = np.fromiter(map(len, word_lists), dtype=np.int64, count=len(word_lists))
        distinct, indices = _dictionary(word_lists)
        table = np.fromiter(
            (xxhash.xxh3_64_intdigest(w.encode("utf-8", "surrogatepass")) for w in distinct),
            dtype=np.uint64,
            count=len(distinct),
        )
        words = table[indices] if len(distinct) else np.empty(0, np.uint64)
        counts = np.maximum(lengths - ngram + 1, 0)
        total = len(words) - ngram + 1
        if total > 0 and counts.sum() > 0:
            hashes = words[:total].copy()
            with np.errstate(over="ignore"):
                for k in range(1, ngram):
                    hashes = hashes * _MIX + words[k : total + k]
            hashes = _finalise(hashes)
            # Keep only the n-grams that start and end inside one document.
            starts = np.cumsum(lengths) - lengths
            doc = np.repeat(np.arange(len(lengths)), counts)
            position = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            self.hashes = hashes[starts[doc] + position]
        else:
            self.hashes = np.empty(0, dtype=np.uint64)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint64)
        self._sets: dict[int, np.ndarray] = {}

    def rows(self, index: int) -> np.ndarray:
        return self.hashes[int(self.offsets[index]) : int(self.offsets[index + 1])]

    def unique(self, index: int) -> np.ndarray:
        found = self._sets.get(index)
        if found is None:
            found = self._sets[index] = np.unique(self.rows(index))
        return found

    def jaccard(self, i: int, j: int) -> float:
        a, b = self.unique(i), self.unique(j)
        inter = len(np.intersect1d(a, b, assume_unique=True))
        return inter / (len(a) + len(b) - inter)


def _dictionary(word_lists: Sequence[list[str]]) -> tuple[list[str], np.ndarray]:
    """The distinct words and, for every word occurrence in order, its index among them."""
    try:  # Arrow dictionary-encodes every occurrence in C++; each distinct word is hashed once
        encoded = pa.array(word_lists, type=pa.list_(pa.large_string())).flatten().dictionary_encode()
        return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    except (UnicodeError, pa.ArrowException):  # lone surrogates: Arrow holds valid UTF-8 only
        flat = list(itertools.chain.from_iterable(word_lists))
        position = {word: i for i, word in enumerate(dict.fromkeys(flat))}
        return list(position), np.fromiter(map(position.__getitem__, flat), dtype=np.int64, count=len(flat))


def _finalise(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads the combined word hashes over all 64 bits."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _band_ids(shingles: _Shingles, rows: np.ndarray, num_perm: int, bands: int, seed: int) -> np.ndarray:
    """For each of ``rows`` (documents with n-grams), an id per LSH band; -1 where the band is unique.

    rensa computes every signature and flags the rows that share a band with another; only the
    flagged rows' signatures are brought into numpy and banded.
    """
    ids = np.full((len(rows), bands), -1, dtype=np.int64)
    if len(rows) < 2:
        return ids
    lengths = (shingles.offsets[rows + 1] - shingles.offsets[rows]).astype(np.int64)
    flat, offsets = _gather(shingles, rows, lengths)
    matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(flat, offsets, num_perm, seed)
    lsh = rensa.RMinHashLSH(0.5, num_perm, bands)
    flagged = np.flatnonzero(np.asarray(lsh.query_duplicate_flags_matrix_one_shot(matrix), dtype=bool))
    if len(flagged) < 2:
        return ids
    sub_flat, sub_offsets = _gather(shingles, rows[flagged], lengths[flagged])
    sub = rensa.RMinHash.digest_matrix_from_flat_token_hashes(sub_flat, sub_offsets, num_perm, seed)
    signatures = np.asarray(sub.to_rows(), dtype=np.uint32)
    width = num_perm // bands
    for band in range(bands):
        block = np.ascontiguousarray(signatures[:, band * width : (band + 1) * width])
        keys = block.view(np.dtype((np.void, block.dtype.itemsize * width))).ravel()
        _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        inverse = inverse.ravel()
        ids[flagged, band] = np.where(counts[inverse] > 1, inverse, -1)
    return ids


def _gather(shingles: _Shingles, rows: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = shingles.offsets[rows].astype(np.int64)
    take = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)
    return shingles.hashes[take], offsets


def _candidates(ids: np.ndarray) -> dict[int, list[list[int]]]:
    """Bucket lists: for each row, the buckets (one per shared band) it falls into, keyed by band id."""
    buckets: dict[tuple[int, int], list[int]] = {}
    by_row: dict[int, list[list[int]]] = {}
    for row, band in zip(*np.nonzero(ids >= 0)):
        bucket = buckets.setdefault((int(band), int(ids[row, band])), [])
        by_row.setdefault(int(row), []).append(bucket)
    return by_row


def deduplicate(
    texts: Iterable[str], *, threshold: float = 0.8, ngram: int = 5, num_perm: int = 128, seed: int = 0
) -> DedupResult:
    """Removes exact and near-duplicate documents, keeping the first of each.

    Args:
        texts: the documents (cleaned text), in corpus order.
        threshold: the word n-gram Jaccard similarity at or above which a document is a
            near-duplicate of an earlier kept one, in (0, 1].
        ngram: words per n-gram; documents with fewer words are deduplicated exactly only.
        num_perm: MinHash permutations (more: fewer missed pairs, slower).
        seed: the MinHash seed.

    Returns:
        A :class:`DedupResult`: the kept indices (ascending) and how many each kind removed.

    Raises:
        DataError: a parameter out of range, or a text that is not a string.
    """
    _check_params(threshold, ngram, num_perm)
    texts = list(texts)
    word_lists = [_words(_as_text(t, i)) for i, t in enumerate(texts)]
    keep = np.ones(len(texts), dtype=bool)
    first: dict[int, int] = {}
    for index, words in enumerate(word_lists):
        key = xxhash.xxh3_128_intdigest(" ".join(words).encode("utf-8", "surrogatepass"))
        if first.setdefault(key, index) != index:
            keep[index] = False
    exact_removed = int((~keep).sum())
    long_enough = np.fromiter((len(w) >= ngram for w in word_lists), dtype=bool, count=len(texts))
    rows = np.flatnonzero(keep & long_enough)
    shingles = _Shingles([word_lists[i] for i in rows], ngram)
    ids = _band_ids(shingles, np.arange(len(rows)), num_perm, _bands(threshold, num_perm), seed)
    near_removed = 0
    # In corpus order: a row is removed if one of its LSH buckets holds an earlier kept row whose
    # exact Jaccard reaches the threshold; buckets only ever hold kept rows.
    for row, buckets in sorted(_candidates(ids).items()):
        seen: set[int] = set()
        duplicate = False
        for bucket in buckets:
            for other in bucket:
                if other not in seen:
                    seen.add(other)
                    if shingles.jaccard(other, row) >= threshold:
                        duplicate = True
                        break
            if duplicate:
                break
        if duplicate:
            keep[rows[row]] = False
            near_removed += 1
        else:
            for bucket in buckets:
                bucket.append(row)
    return DedupResult(
        keep=np.flatnonzero(keep).astype(np.int64),
        exact_removed=exact_removed,
        near_removed=near_removed,
        short_documents=int((~long_enough).sum()),
    )


def _as_text(value: object, index: int) -> str:
    if not isinstance(value, str):
        raise DataError(
            f"expected every document to be a string, got {type(value).__name__} at index {index}; "
            "drop or convert missing texts in 'clean'",
            step=_STEP,
        )
    return value


def straddling_pairs(
    train_texts: Sequence[str], val_texts: Sequence[str], *, threshold: float = 0.8, ngram: int = 5
) -> list[tuple[int, int, float]]:
    """Near-duplicate pairs across two sets of documents (e.g. the train and validation splits).

    Candidates come from MinHash LSH over both sets together; each is confirmed by its exact word
    n-gram Jaccard. Documents with fewer than ``ngram`` words pair only when their normalised texts
    are equal (similarity 1.0).

    Args:
        train_texts: the first set.
        val_texts: the second set.
        threshold: the Jaccard similarity at or above which a pair is reported, in (0, 1].
        ngram: words per n-gram.

    Returns:
        ``(train_index, val_index, jaccard)`` for every pair at or above the threshold, sorted.

    Raises:
        DataError: a parameter out of range, or a text that is not a string.
    """
    _check_params(threshold, ngram, 128)
    texts = list(train_texts) + list(val_texts)
    n_train = len(train_texts)
    word_lists = [_words(_as_text(t, i)) for i, t in enumerate(texts)]
    pairs: set[tuple[int, int, float]] = set()
    short_train: dict[str, list[int]] = {}
    for index in range(n_train):
        if len(word_lists[index]) < ngram:
            short_train.setdefault(" ".join(word_lists[index]), []).append(index)
    for index in range(n_train, len(texts)):
        if len(word_lists[index]) < ngram:
            for other in short_train.get(" ".join(word_lists[index]), ()):
                pairs.add((other, index - n_train, 1.0))
    rows = np.array([i for i, w in enumerate(word_lists) if len(w) >= ngram], dtype=np.int64)
    shingles = _Shingles([word_lists[i] for i in rows], ngram)
    ids = _band_ids(shingles, np.arange(len(rows)), 128, _bands(threshold, 128), 0)
    for row, buckets in sorted(_candidates(ids).items()):
        if rows[row] < n_train:  # pairs are looked up from their validation side
            for bucket in buckets:
                bucket.append(row)
            continue
        for other in {o for bucket in buckets for o in bucket}:
            similarity = shingles.jaccard(other, row)
            if similarity >= threshold:
                pairs.add((int(rows[other]), int(rows[row]) - n_train, similarity))
    return sorted(pairs)

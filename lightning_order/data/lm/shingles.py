"""What deduplication compares, defined once: words, n-gram shingles and their hashes, Jaccard, MinHash bands.

The ``dedup`` step of the LM pipeline (:mod:`.deduplication`, on the rule of :mod:`.clusters`) removes duplicates from the whole
cleaned corpus *before* the split, so no near-duplicate can land on both sides of it (the
tests prove it with an in-memory reference of the same rule, ``tests/dedup_reference.py``; a
``dedup`` run after the split counts the pairs it finds across it, ``straddling`` in its record).
The validator's ``dedup-after-split`` rule judges the recorded order (``dedup`` before
``split``), not pairs.

Definitions (one place, used by every function here and by :mod:`.clusters`):

- A document's *words* are the whitespace-separated tokens of its lower-cased text; its
  *normalised text* is those words joined by single spaces.
- *Exact duplicates* have the same normalised text (compared by a 128-bit xxh3 hash, the
  document's *key*).
- *Near-duplicates* have a Jaccard similarity of their sets of word ``ngram``-grams at or above
  ``threshold``. Candidates come from MinHash signatures banded for LSH (rensa, in Rust); every
  candidate pair is then confirmed by its *exact* Jaccard, so nothing is removed on an estimate.
- Duplicates form clusters (exact duplicates; near-duplicates connected by confirmed pairs); a
  cluster keeps the document with the smallest key, whatever order the corpus came in.
- Documents with fewer than ``ngram`` words have no n-grams: they are deduplicated exactly only.

The n-gram hashes of many documents are computed in one numpy pass (:class:`Shingles`: Arrow
dictionary-encodes the words, each distinct word is hashed once). Texts held in Arrow are split
into words by Arrow itself (:func:`arrow_words`: the same words, without a Python string per
document). The LSH band count
(:func:`lsh_bands`) is the largest number of rows per band (dividing ``num_perm``) that still
finds a pair at exactly the threshold with probability ≥ 0.99, so misses are rare and extra
candidates cost only an exact comparison.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lightning_order.data.engine.keys import not_ascii, replace_rows
from lightning_order.data.engine.long_texts import LONG_TEXT_CHARS, word_pieces

__all__ = [
    "Shingles",
    "arrow_words",
    "lsh_bands",
    "mix_hashes",
    "ngram_hashes",
    "normalised_digest",
    "shingle_set",
    "word_hashes",
    "words",
]

_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier (golden ratio) for the n-gram combine


def words(text: str) -> list[str]:
    """A document's words: the whitespace-separated tokens of its lower-cased text."""
    return text.lower().split()


def arrow_words(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Every text's :func:`words`, computed by Arrow: all of them flat, in order, and each text's count.

    Arrow splits at exactly the whitespace ``str.split`` does (the same set, every code point), and
    lower-cases an ASCII word itself; a word with another character is lower-cased by
    ``str.lower`` (Python's full case mapping). Lower-casing word by word gives the whole text's
    lower case split: no character's lower case gains or loses whitespace, and the one rule that
    looks at neighbours (a final sigma) stops at whitespace. A null text has no words.
    """
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    lists = pc.utf8_split_whitespace(texts)
    flat, parents = lists.flatten(), pc.list_parent_indices(lists)
    found = pc.greater(pc.binary_length(flat), 0)  # a text's leading and trailing whitespace split off ""
    flat, parents = flat.filter(found), parents.filter(found)
    counts = np.bincount(parents.to_numpy(zero_copy_only=False), minlength=len(texts)).astype(np.int64)
    lowered = pc.ascii_lower(flat)
    wide = not_ascii(flat)
    if wide.any():
        lowered = replace_rows(lowered, wide, [w.lower() for w in flat.filter(pa.array(wide)).to_pylist()])
    return lowered, counts


def normalised_digest(text: str, hasher: xxhash.xxh3_64 | xxhash.xxh3_128) -> int:
    """``hasher``'s digest of ``text``'s normalised text (its words joined by one space).

    A long text is fed in pieces (never held as one list of words); the digest is the one of
    the whole normalised text.
    """
    if len(text) <= LONG_TEXT_CHARS:
        hasher.update(" ".join(words(text)).encode("utf-8", "surrogatepass"))
        return hasher.intdigest()
    separate = False
    for piece in word_pieces(text):
        found = words(piece)
        if found:
            hasher.update(
                (" " if separate else "").encode() + " ".join(found).encode("utf-8", "surrogatepass")
            )
            separate = True
    return hasher.intdigest()


def _hash_words(found: Sequence[str]) -> np.ndarray:
    return np.fromiter(
        (xxhash.xxh3_64_intdigest(w.encode("utf-8", "surrogatepass")) for w in found),
        dtype=np.uint64,
        count=len(found),
    )


def word_hashes(text: str) -> np.ndarray:
    """The xxh3-64 hash of each of ``text``'s words, in order (a long text read in pieces)."""
    if len(text) <= LONG_TEXT_CHARS:
        return _hash_words(words(text))
    return np.concatenate([_hash_words(words(piece)) for piece in word_pieces(text)])


def ngram_hashes(hashes: np.ndarray, ngram: int) -> np.ndarray:
    """The hash of every ``ngram`` consecutive word hashes (one per n-gram, in order; empty below ``ngram``).

    Computed in place on one buffer (a long document costs a few times its words' hashes).
    """
    total = len(hashes) - ngram + 1
    if total <= 0:
        return np.empty(0, dtype=np.uint64)
    out = hashes[:total].copy()
    with np.errstate(over="ignore"):
        for k in range(1, ngram):
            np.multiply(out, _MIX, out=out)
            np.add(out, hashes[k : total + k], out=out)
    return _finalise(out, in_place=True)


def lsh_bands(threshold: float, num_perm: int) -> int:
    """The LSH band count: most rows per band with P(candidate | J = threshold) ≥ 0.99."""
    best = num_perm  # one row per band: the widest net
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= 0.99:
            best = bands
    return best


class Shingles:
    """Hashed word n-grams of many documents in one flat buffer (``row_offsets`` per document)."""

    def __init__(self, word_lists: Sequence[list[str]], ngram: int) -> None:
        lengths = np.fromiter(map(len, word_lists), dtype=np.int64, count=len(word_lists))
        distinct, indices = _dictionary(word_lists)
        table = np.fromiter(
            (xxhash.xxh3_64_intdigest(w.encode("utf-8", "surrogatepass")) for w in distinct),
            dtype=np.uint64,
            count=len(distinct),
        )
        self._build(table, indices, lengths, ngram)

    @classmethod
    def of_texts(cls, texts: pa.Array | pa.ChunkedArray, ngram: int) -> Shingles:
        """The shingles of texts held in Arrow (:func:`arrow_words`: the same as of their word lists)."""
        flat, lengths = arrow_words(texts)
        encoded = flat.dictionary_encode()
        table = np.fromiter(
            map(xxhash.xxh3_64_intdigest, encoded.dictionary.cast(pa.large_binary()).to_pylist()),
            dtype=np.uint64,
            count=len(encoded.dictionary),
        )
        shingles = cls.__new__(cls)
        shingles._build(table, encoded.indices.to_numpy(zero_copy_only=False), lengths, ngram)
        return shingles

    def _build(self, table: np.ndarray, indices: np.ndarray, lengths: np.ndarray, ngram: int) -> None:
        """The n-gram hashes of the documents whose words, flat, are ``indices`` into the distinct
        words' hashes ``table`` (``lengths`` words each)."""
        words = table[indices] if len(table) else np.empty(0, np.uint64)
        self.lengths = lengths
        counts = np.maximum(lengths - ngram + 1, 0)
        if len(words) - ngram + 1 > 0 and counts.sum() > 0:
            hashes = ngram_hashes(words, ngram)
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


def _finalise(x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """splitmix64's finaliser: spreads the combined word hashes over all 64 bits (``x`` itself changed if ``in_place``)."""
    x = x if in_place else x.copy()
    with np.errstate(over="ignore"):
        for shift, multiplier in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            np.bitwise_xor(x, x >> np.uint64(shift), out=x)
            np.multiply(x, np.uint64(multiplier), out=x)
        np.bitwise_xor(x, x >> np.uint64(31), out=x)
    return x


def mix_hashes(columns: np.ndarray, salt: int = 0) -> np.ndarray:
    """One uint64 per row of ``columns`` (``(n, k)`` integers), spread over 64 bits (an LSH band's key)."""
    columns = np.asarray(columns, dtype=np.uint64)
    with np.errstate(over="ignore"):
        combined = np.full(len(columns), np.uint64(salt) * _MIX, dtype=np.uint64)
        for k in range(columns.shape[1]):
            combined = combined * _MIX + columns[:, k]
    return _finalise(combined, in_place=True)


def shingle_set(text: str, ngram: int = 5) -> np.ndarray:
    """The sorted distinct hashes of ``text``'s word n-grams (empty below ``ngram`` words), as :class:`Shingles` hashes them."""
    return np.unique(ngram_hashes(word_hashes(text), ngram))

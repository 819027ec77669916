"""Near-duplicates across partitions: MinHash band keys, candidate pairs, clusters, the one kept.

The definitions are the ``dedup`` step's (:mod:`.deduplication`: word n-grams of the lower-cased text, Jaccard similarity,
``threshold``); what changes is that the corpus is never in one place:

1. per partition, every document with ``ngram`` words or more gets a MinHash signature (rensa)
   and one key per LSH band (:func:`band_keys`); a shorter one gets one key, the hash of its
   normalised text (it can only be an exact duplicate). Keys are routed to buckets by value, so
   equal keys meet in one bucket whichever partitions they came from;
2. per bucket, documents sharing a key are candidate pairs (:func:`pairs_of_groups`);
3. every candidate pair is confirmed by its *exact* n-gram Jaccard (nothing is removed on an
   estimate);
4. confirmed pairs are connected into clusters, and each cluster keeps the document with the
   smallest key (the 128-bit hash of its normalised text), on the workers
   (:func:`~.grouping.connected_labels`). A
   document may so be removed for resembling one that resembles the kept one (a chain); that
   is the rule, and it does not depend on any order.

A document is named by a 64-bit id: its part (train, validation, or the whole corpus), its
partition and its row there (:func:`doc_ids`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lightning_order.data.engine.long_texts import LONG_TEXT_CHARS
from lightning_order.data.lm.shingles import (
    Shingles,
    lsh_bands,
    mix_hashes,
    ngram_hashes,
    normalised_digest,
    word_hashes,
    words,
)

__all__ = [
    "MAX_GROUP",
    "band_keys",
    "doc_ids",
    "pairs_of_groups",
    "split_doc_ids",
]

#: A group of documents sharing a band key is paired whole up to this many members; a larger one
#: (boilerplate shared by very many documents) pairs each member with its next ``_NEIGHBOURS``.
MAX_GROUP = 256
_NEIGHBOURS = 16
_PART_BITS, _PARTITION_BITS, _ROW_BITS = 2, 21, 40
#: Characters of text shingled and signed at once (the word lists and n-gram arrays of a batch
#: are what a worker holds, whatever the partition's size).
SIGNATURE_BATCH_CHARS = 1 << 22


def doc_ids(part: int, partition: int, rows: np.ndarray) -> np.ndarray:
    """The int64 ids of ``rows`` of ``partition`` of ``part``."""
    base = (int(part) << (_PARTITION_BITS + _ROW_BITS)) | (int(partition) << _ROW_BITS)
    return np.asarray(rows, dtype=np.int64) | np.int64(base)


def split_doc_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(part, partition, row)`` of each id (:func:`doc_ids` undone)."""
    ids = np.asarray(ids, dtype=np.int64)
    row = ids & ((1 << _ROW_BITS) - 1)
    partition = (ids >> _ROW_BITS) & ((1 << _PARTITION_BITS) - 1)
    return ids >> (_PARTITION_BITS + _ROW_BITS), partition, row


def band_keys(
    texts: Sequence[str] | pa.Array | pa.ChunkedArray, threshold: float, ngram: int, num_perm: int, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """One uint64 key per LSH band of each text with n-grams, one key per shorter text.

    Args:
        texts: the documents: strings, or an Arrow string column (split into words by Arrow, the
            same keys).
        threshold, ngram, num_perm, seed: as :func:`deduplicate`'s.

    Returns:
        ``(keys, rows, short)``: the keys, the index in ``texts`` of the text each came from, and
        how many texts were too short for n-grams.
    """
    signatures, few = _signatures(texts, ngram, num_perm, seed)
    short_rows = np.flatnonzero(few)
    short_keys = np.fromiter(
        (normalised_digest(_text(texts, i), xxhash.xxh3_64(seed=seed)) for i in short_rows.tolist()),
        dtype=np.uint64,
        count=len(short_rows),
    )
    rows = np.flatnonzero(~few)
    if not len(rows):
        return short_keys, short_rows, len(short_rows)
    bands = lsh_bands(threshold, num_perm)
    width = num_perm // bands
    keys = np.empty((len(rows), bands), dtype=np.uint64)
    for band in range(bands):  # one band's columns of the kept rows at a time: no copy of the whole matrix
        keys[:, band] = mix_hashes(signatures[rows, band * width : (band + 1) * width], salt=band + 1)
    long_keys = keys.ravel()
    long_rows = np.repeat(rows, bands)
    return np.concatenate([long_keys, short_keys]), np.concatenate([long_rows, short_rows]), len(short_rows)


def few_words(text: str, ngram: int) -> bool:
    """Whether ``text`` has fewer than ``ngram`` words (so no n-gram): it is deduplicated exactly only."""
    return len(text.split(maxsplit=ngram - 1)) < ngram


def _text(texts: Sequence[str] | pa.Array | pa.ChunkedArray, index: int) -> str:
    return texts[index].as_py() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else texts[index]


def _signatures(
    texts: Sequence[str] | pa.Array | pa.ChunkedArray, ngram: int, num_perm: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(signatures, few)``: a ``(len(texts), num_perm)`` uint64 MinHash signature per text, and
    whether each has fewer than ``ngram`` words (its signature row is then meaningless).

    Texts up to :data:`~.long_texts.LONG_TEXT_CHARS` are shingled together, in batches of
    :data:`SIGNATURE_BATCH_CHARS` (from Arrow: by Arrow); a longer one is shingled alone from its
    word hashes (read in pieces, never as one list of words).
    """
    import rensa

    arrow = isinstance(texts, (pa.Array, pa.ChunkedArray))
    if arrow:  # sizes in bytes: the batches only bound memory, the signatures do not depend on them
        sizes = pc.binary_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    out = np.empty((len(texts), num_perm), dtype=np.uint64)
    few = np.zeros(len(texts), dtype=bool)
    long = sizes > LONG_TEXT_CHARS
    for batch in _signature_batches(sizes, np.flatnonzero(~long)):
        if arrow:
            shingles = Shingles.of_texts(texts.take(pa.array(batch)), ngram)
        else:
            shingles = Shingles([words(texts[i]) for i in batch], ngram)
        few[batch] = shingles.lengths < ngram
        matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
            shingles.hashes, shingles.offsets, num_perm, seed
        )
        out[batch] = np.asarray(matrix.to_rows(), dtype=np.uint64).reshape(len(batch), num_perm)
    for i in np.flatnonzero(long).tolist():
        text = _text(texts, i)
        few[i] = few_words(text, ngram)
        if few[i]:
            continue
        hashes = ngram_hashes(word_hashes(text), ngram)
        offsets = np.array([0, len(hashes)], dtype=np.uint64)
        matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(hashes, offsets, num_perm, seed)
        out[i] = np.asarray(matrix.to_rows(), dtype=np.uint64).reshape(num_perm)
    return out, few


def _signature_batches(sizes: np.ndarray, rows: np.ndarray) -> Iterable[np.ndarray]:
    """``rows`` in consecutive batches of at most :data:`SIGNATURE_BATCH_CHARS` characters (a signature
    depends on its own text only, so batching changes nothing but the memory a partition costs)."""
    if not len(rows):
        return
    batch = np.cumsum(sizes[rows]) // SIGNATURE_BATCH_CHARS
    cuts = np.flatnonzero(np.diff(batch)) + 1
    yield from np.split(rows, cuts)


def pairs_of_groups(keys: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Every pair of distinct documents that share a key (``(n, 2)`` int64, ``a < b``, unique, sorted)."""
    order = np.argsort(keys, kind="stable")  # a group's members are sorted below, so their order is free
    keys, docs = keys[order], docs[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    sizes = np.diff(np.concatenate([starts, [len(keys)]]))
    first, second = docs[starts[sizes == 2]], docs[starts[sizes == 2] + 1]  # most groups: one pair at most
    distinct = first != second
    pairs = [np.stack([np.minimum(first, second)[distinct], np.maximum(first, second)[distinct]], axis=1)]
    for start, size in zip(starts[sizes > 2].tolist(), sizes[sizes > 2].tolist()):
        members = np.unique(docs[start : start + size])
        if len(members) < 2:
            continue
        if len(members) <= MAX_GROUP:
            a, b = np.triu_indices(len(members), k=1)
        else:
            a = np.repeat(np.arange(len(members)), _NEIGHBOURS)
            b = a + np.tile(np.arange(1, _NEIGHBOURS + 1), len(members))
            a, b = a[b < len(members)], b[b < len(members)]
        pairs.append(np.stack([members[a], members[b]], axis=1))
    found = np.concatenate(pairs).astype(np.int64, copy=False)
    return np.unique(found, axis=0) if len(found) else np.empty((0, 2), dtype=np.int64)

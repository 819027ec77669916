"""Keys and their hashes: what a split and the leakage checks are decided on, for every pipeline.

A row's key is its group value, or its text reduced to its word sequence (:func:`text_key`:
lower-cased ``\\w+`` runs joined by one space), so near-duplicates that differ by a stray ``&``,
quote or ``!`` share a key. :func:`key_hashes` is the seed-independent xxh3-64 hash of each key
(kept as the ``key_hash`` column and the LM's document hashes, for leakage checks);
:func:`is_val` decides the split from the seeded hash, so equal keys always land together and
adding rows never moves existing ones. :func:`key_hash_array` and :func:`text_keys` compute the
same over Arrow arrays without per-row Python (non-ASCII rows fall back to :func:`text_key`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lightning_order.data.engine.long_texts import LONG_TEXT_CHARS, word_pieces

__all__ = [
    "KEY_BATCH_BYTES",
    "KEY_HASH_COLUMN",
    "hash_keys",
    "is_val",
    "key_bytes",
    "key_hash_array",
    "key_hashes",
    "replace_rows",
    "text_key",
    "text_key_hashes",
    "text_keys",
    "val_mask",
]

#: The column of each encoded row's unseeded key hash (int64), read by the leakage checks.
KEY_HASH_COLUMN = "key_hash"
_BUCKETS = 1 << 20
#: Bytes of text keyed at once by :func:`text_key_hashes` (what a worker holds, whatever the partition).
KEY_BATCH_BYTES = 1 << 22
_WORD = re.compile(r"\w+")


def text_key(text: Any) -> str:
    """The split key of a text: its lower-cased word sequence (punctuation and spacing ignored)."""
    return " ".join(_WORD.findall(str(text).lower()))


def _keys(keys: Sequence[Any], text: bool) -> list[str]:
    return [text_key(k) for k in keys] if text else [str(k) for k in keys]


def key_hashes(keys: Sequence[Any], text: bool = False) -> np.ndarray:
    """The int64 hash of each key (xxh3-64, seed-independent).

    Args:
        keys: the key values.
        text: the keys are texts: hash their :func:`text_key` instead of the raw string.
    """
    out = np.fromiter(
        (xxhash.xxh3_64_intdigest(k.encode("utf-8")) for k in _keys(keys, text)),
        dtype=np.uint64,
        count=len(keys),
    )
    return out.view(np.int64)


def val_mask(seeded_hashes: np.ndarray, val_fraction: float) -> np.ndarray:
    """Whether each key goes to validation, from its seeded xxh3-64 hash (uint64): the split's one rule."""
    buckets = (np.asarray(seeded_hashes, dtype=np.uint64) % np.uint64(_BUCKETS)).astype(np.int64)
    return buckets < round(val_fraction * _BUCKETS)


def is_val(keys: Sequence[Any], val_fraction: float, seed: int, text: bool = False) -> np.ndarray:
    """Whether each key belongs to the validation split (a boolean array).

    Args:
        keys: the key values.
        val_fraction: the validation share.
        seed: moves the split.
        text: the keys are texts: split on their :func:`text_key`.
    """
    seeded = np.fromiter(
        (xxhash.xxh3_64_intdigest(k.encode("utf-8"), seed=seed) for k in _keys(keys, text)),
        dtype=np.uint64,
        count=len(keys),
    )
    return val_mask(seeded, val_fraction)


def replace_rows(array: pa.Array, mask: np.ndarray, values: list[Any]) -> pa.Array:
    """``array`` with the rows where ``mask`` is set replaced by ``values`` (in order)."""
    if not len(values):
        return array
    return pc.replace_with_mask(array, pa.array(mask), pa.array(values, type=array.type))


def python_rows(array: pa.Array, mask: np.ndarray, fn: Any) -> list[Any]:
    """``fn`` of each value of ``array`` where ``mask`` is set (the rows Arrow kernels cannot do)."""
    return [fn(v) for v in array.filter(pa.array(mask)).to_pylist()]


def not_ascii(array: pa.Array) -> np.ndarray:
    """Whether each value holds a non-ASCII character (a null counts as ASCII)."""
    return ~np.asarray(pc.string_is_ascii(array).fill_null(True), dtype=bool)


def text_keys(array: pa.Array) -> pa.Array:
    """:func:`text_key` of every text: its lower-cased ``\\w+`` runs joined by one space."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count == 0 and (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        keys = _ascii_text_keys(array)
    else:
        keys = pc.utf8_trim(
            pc.replace_substring_regex(pc.ascii_lower(array), r"[^a-z0-9_]+", " "), characters=" "
        )
    wide = not_ascii(array)
    if wide.any():
        keys = replace_rows(keys, wide, python_rows(array, wide, text_key))
    return keys


def _ascii_text_keys(array: pa.Array) -> pa.Array:
    """:func:`text_key` of texts without nulls, from their bytes: exact for ASCII texts (a byte of
    another character counts as a separator here; :func:`text_keys` replaces those rows).

    The word bytes (``[A-Za-z0-9_]``, lower-cased) are kept, and one separator byte, made a
    space, before every run of them but a text's first.
    """
    wide = pa.types.is_large_string(array.type)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)
    buffer = array.buffers()[2]
    data = (
        np.frombuffer(buffer, dtype=np.uint8)[offsets[0] : offsets[-1]] if buffer else np.empty(0, np.uint8)
    )
    offsets -= offsets[0]
    folded = data | np.uint8(0x20)  # an ASCII letter in lower case (other bytes: only compared)
    letter = (folded - np.uint8(ord("a"))) < 26
    word = letter | ((data - np.uint8(ord("0"))) < 10) | (data == ord("_"))
    out = np.where(letter, folded, np.where(word, data, np.uint8(ord(" "))))
    follows_word = np.zeros(len(data), dtype=bool)
    follows_word[1:] = word[:-1]
    follows_word[offsets[:-1][offsets[:-1] < len(data)]] = False  # a text's first byte follows nothing
    starts = np.flatnonzero(word & ~follows_word)  # where each run of word bytes begins
    first = np.zeros(len(starts) + 1, dtype=bool)
    first[np.searchsorted(starts, offsets[:-1])] = True  # each text's first run (or a later text's)
    keep = word  # the word bytes, and the separator before every run but a text's first
    keep[starts[~first[:-1]] - 1] = True
    out = np.compress(keep, out)
    counts = np.add.reduceat(np.append(keep, False).view(np.uint8), offsets[:-1], dtype=np.int64)
    counts[offsets[1:] == offsets[:-1]] = 0  # an empty text (reduceat gives the byte at its start)
    ends = np.concatenate([[0], np.cumsum(counts)])
    return pa.Array.from_buffers(
        array.type,
        len(array),
        [None, pa.py_buffer(ends.astype(np.int64 if wide else np.int32)), pa.py_buffer(out)],
    )


def key_bytes(array: pa.Array, text: bool) -> list[bytes]:
    """The UTF-8 bytes each key is hashed from: :func:`text_keys` of texts, else ``str(value)``.

    A text column with nulls keys them as :func:`text_key` does (``str(None)``).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if text and array.null_count == 0:  # the UTF-8 bytes as they are: no str made and encoded again
        return text_keys(array).cast(pa.binary()).to_pylist()
    if text:
        return [text_key(k).encode("utf-8") for k in array.to_pylist()]
    return [str(k).encode("utf-8") for k in array.to_pylist()]


def hash_keys(values: list[bytes], seed: int | None = None) -> np.ndarray:
    """The xxh3-64 hash (uint64) of each key's bytes, with ``seed`` (``None``: unseeded)."""
    if seed is None:
        return np.fromiter(map(xxhash.xxh3_64_intdigest, values), dtype=np.uint64, count=len(values))
    return np.fromiter(
        (xxhash.xxh3_64_intdigest(v, seed=seed) for v in values), dtype=np.uint64, count=len(values)
    )


def text_key_hashes(array: pa.Array, seeds: Sequence[int | None]) -> list[np.ndarray]:
    """The xxh3-64 hash (uint64) of every text's :func:`text_key`, once per seed in ``seeds``.

    The keys are made once for all seeds, :data:`KEY_BATCH_BYTES` of text at a time. A text of more than
    :data:`~.long_texts.LONG_TEXT_CHARS` bytes is keyed in pieces cut before whitespace (the
    same words, so the same hash) and never held as one key or one list of words.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    sizes = pc.fill_null(pc.binary_length(array), 0).to_numpy(zero_copy_only=False)
    long = sizes > LONG_TEXT_CHARS
    out = [np.empty(len(array), dtype=np.uint64) for _ in seeds]
    rows = np.flatnonzero(~long)
    batch = np.cumsum(sizes[rows]) // KEY_BATCH_BYTES
    for chosen in np.split(rows, np.flatnonzero(np.diff(batch)) + 1) if len(rows) else ():
        keys = key_bytes(array.take(pa.array(chosen)), text=True)
        for hashes, seed in zip(out, seeds):
            hashes[chosen] = hash_keys(keys, seed)
        del keys
    for row in np.flatnonzero(long).tolist():
        hashers = [xxhash.xxh3_64() if seed is None else xxhash.xxh3_64(seed=seed) for seed in seeds]
        separate = False
        for piece in word_pieces(array[row].as_py()):
            found = _WORD.findall(piece.lower())
            if found:
                data = (" " if separate else "") + " ".join(found)
                for hasher in hashers:
                    hasher.update(data.encode("utf-8"))
                separate = True
        for hashes, hasher in zip(out, hashers):
            hashes[row] = hasher.intdigest()
    return out


def key_hash_array(array: pa.Array, text: bool, seed: int | None = None) -> np.ndarray:
    """The xxh3-64 hash of each key (uint64), as :func:`key_hashes` does.

    Args:
        array: the key column.
        text: the keys are texts (hash :func:`text_keys`), else ``str(value)``.
        seed: the hash's seed (``None``: unseeded, the stored ``key_hash``).
    """
    return hash_keys(key_bytes(array, text), seed)

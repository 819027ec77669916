"""Step 4, ``split``: train/validation by a hash of the cleaned key (or a group column).

A row's split is a pure function of its key and the seed: rows with the same key always land in
the same split, and adding rows never moves existing ones. The key hash (xxh3, 64 bits) is also
kept as the ``key_hash`` column (seed-independent) so leakage checks compare keys cheaply.

A text key is its cleaned text reduced to its word sequence (lower-cased runs of letters and
digits): near-duplicates that cleaning leaves apart by a stray ``&``, quote or ``!`` then share
a key and land in the same split, instead of leaking across it. A group key is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

__all__ = ["KEY_HASH_COLUMN", "SPLIT_COLUMN", "is_val", "key_hashes", "split_batch", "text_key"]

KEY_HASH_COLUMN = "key_hash"
SPLIT_COLUMN = "_is_val"
_BUCKETS = 1 << 20
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


def is_val(keys: Sequence[Any], val_fraction: float, seed: int, text: bool = False) -> np.ndarray:
    """Whether each key belongs to the validation split (a boolean array).

    Args:
        keys: the key values.
        val_fraction: the validation share.
        seed: moves the split.
        text: the keys are texts: split on their :func:`text_key`.
    """
    buckets = np.fromiter(
        (xxhash.xxh3_64_intdigest(k.encode("utf-8"), seed=seed) % _BUCKETS for k in _keys(keys, text)),
        dtype=np.int64,
        count=len(keys),
    )
    return buckets < round(val_fraction * _BUCKETS)


def split_batch(
    batch: dict[str, list[Any]], key_column: str, val_fraction: float, seed: int, text: bool = False
) -> dict[str, Any]:
    """Returns the split flag column for a batch (``_is_val``)."""
    return {SPLIT_COLUMN: is_val(batch[key_column], val_fraction, seed, text)}

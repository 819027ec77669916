"""Step 4, ``split``: train/validation by a hash of the cleaned key (or a group column).

A row's split is a pure function of its key and the seed: rows with the same key always land in
the same split, and adding rows never moves existing ones. The key hash (xxh3, 64 bits) is also
kept as the ``key_hash`` column (seed-independent) so leakage checks compare keys cheaply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

__all__ = ["KEY_HASH_COLUMN", "SPLIT_COLUMN", "is_val", "key_hashes", "split_batch"]

KEY_HASH_COLUMN = "key_hash"
SPLIT_COLUMN = "_is_val"
_BUCKETS = 1 << 20


def key_hashes(keys: Sequence[Any]) -> np.ndarray:
    """The int64 hash of each key (``str(key)`` hashed with xxh3-64; seed-independent)."""
    out = np.fromiter(
        (xxhash.xxh3_64_intdigest(str(k).encode("utf-8")) for k in keys), dtype=np.uint64, count=len(keys)
    )
    return out.view(np.int64)


def is_val(keys: Sequence[Any], val_fraction: float, seed: int) -> np.ndarray:
    """Whether each key belongs to the validation split (a boolean array)."""
    buckets = np.fromiter(
        (xxhash.xxh3_64_intdigest(str(k).encode("utf-8"), seed=seed) % _BUCKETS for k in keys),
        dtype=np.int64,
        count=len(keys),
    )
    return buckets < round(val_fraction * _BUCKETS)


def split_batch(
    batch: dict[str, list[Any]], key_column: str, val_fraction: float, seed: int
) -> dict[str, Any]:
    """Returns the split flag column for a batch (``_is_val``)."""
    return {SPLIT_COLUMN: is_val(batch[key_column], val_fraction, seed)}

"""Content hashes of the items of a sequence, and a bounded, content-chosen sample of them.

The recorder keeps, for each held-out part of a recorded ``split``, a sample of its items' hashes,
so a fitted step that later reads data no step produced (``train + val``) can be judged by content.
The sample is bottom-k (the ``SAMPLE`` smallest hashes): chosen by content, so the same items are
sampled wherever they appear, and small enough for a JSON ledger (12 hex digits a hash).
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["SAMPLE", "held_out_sample", "item_hashes"]

#: Hashes kept per held-out part at most; a part up to this size is kept whole.
SAMPLE = 4096


def _item_bytes(item: Any) -> bytes | None:
    """An item's content as bytes: text, bytes, or an array row; ``None`` for anything else."""
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    tobytes = getattr(item, "tobytes", None)
    if callable(tobytes) and hasattr(item, "shape"):
        return bytes(tobytes())
    return None


def item_hashes(value: Any) -> list[str] | None:
    """The content hash of each item of ``value``, or ``None`` when it is no sequence of items.

    Args:
        value: a list/tuple of texts, bytes or arrays, a numpy array of rows, a datasets column.

    Returns:
        One 12-hex-digit hash per item, in order; ``None`` for other data (left unjudged).
    """
    if isinstance(value, (str, bytes, bytearray, dict)) or not hasattr(value, "__len__"):
        return None
    try:
        items = [_item_bytes(item) for item in value]
    except TypeError:
        return None
    if not items or any(b is None for b in items):
        return None
    return [hashlib.blake2b(b, digest_size=6).hexdigest() for b in items if b is not None]


def held_out_sample(value: Any) -> dict[str, Any] | None:
    """``{"count": items, "hashes": [...]}``: the ``SAMPLE`` smallest distinct item hashes of ``value``."""
    hashes = item_hashes(value)
    if hashes is None:
        return None
    return {"count": len(hashes), "hashes": sorted(set(hashes))[:SAMPLE]}

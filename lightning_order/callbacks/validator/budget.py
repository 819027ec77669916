"""How much of a run's data the validator holds at once: rows bounded by tokens and bytes.

``sample_rows`` and ``whole_rows`` count rows, and a row may be 16 tokens or 128k: a row count
alone lets the validator's reads grow with the block size (issue #42, item 8: about 2 GB of peak
memory per 1 000 rows of 32k tokens). Every read is therefore also bounded by the stated budgets
below, measured on the items read (the bytes of their arrays and text, the elements of their
integer arrays as tokens):

- one read (a sample, one chunk of a whole-split pass) holds at most :data:`READ_BYTES` and
  :data:`READ_TOKENS`, and always at least one row;
- a split is hashed whole (``whole_rows``) only while all its items stay within
  :data:`WHOLE_BYTES` and :data:`WHOLE_TOKENS`; a larger one is sampled like a longer one;
- an iterable split (a stream) is read as tokens for the overlap check up to
  :data:`STREAM_TOKENS` per split (:mod:`.stream_tokens`).

What was read is dropped when the check that read it returns: nothing outlives the validator's
hooks but hashes and figures (docs/validator.md, "Memory").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = [
    "READ_BYTES",
    "READ_TOKENS",
    "STREAM_TOKENS",
    "WHOLE_BYTES",
    "WHOLE_TOKENS",
    "item_size",
    "rows_within",
]

#: Bytes of items one read holds at once (64 MiB).
READ_BYTES = 64 << 20
#: Token ids (elements of integer arrays) one read holds at once (4M: 128 rows of 32k tokens).
READ_TOKENS = 1 << 22
#: A split is hashed whole only while its items hold at most this many bytes (1 GiB) ...
WHOLE_BYTES = 1 << 30
#: ... and at most this many token ids (64M), read :data:`READ_BYTES` at a time.
WHOLE_TOKENS = 1 << 26
#: Token ids read off each iterable split for the overlap check (4M: 32 MiB as int64, a few seconds
#: of reading and hashing; docs/validator.md gives the share of train it covers and what it finds).
STREAM_TOKENS = 1 << 22


def item_size(item: Any) -> tuple[int, int]:
    """``(bytes, tokens)`` of one item or collated batch: its arrays' bytes and text, its integer elements.

    Nested dicts, lists and tuples are summed; other leaves (numbers) count a few bytes.
    """
    if torch.is_tensor(item):
        integer = not item.is_floating_point() and not item.is_complex() and item.dtype != torch.bool
        return int(item.nelement() * item.element_size()), int(item.nelement()) if integer else 0
    if isinstance(item, np.ndarray):
        return int(item.nbytes), int(item.size) if np.issubdtype(item.dtype, np.integer) else 0
    if isinstance(item, (str, bytes, bytearray)):
        return len(item), 0
    if isinstance(item, Mapping):
        item = list(item.values())
    if isinstance(item, (list, tuple)):
        sizes = [item_size(x) for x in item]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    return 8, 0


def rows_within(
    size: tuple[int, int], rows: int, max_bytes: int = READ_BYTES, max_tokens: int = READ_TOKENS
) -> int:
    """How many of ``rows`` items of ``size`` (:func:`item_size`) fit the budgets; at least one.

    Args:
        size: ``(bytes, tokens)`` of one item.
        rows: the rows wanted.
        max_bytes: the bytes budget.
        max_tokens: the tokens budget.
    """
    item_bytes, item_tokens = size
    fit = rows
    if item_bytes:
        fit = min(fit, max_bytes // item_bytes)
    if item_tokens:
        fit = min(fit, max_tokens // item_tokens)
    return max(1, min(rows, fit))

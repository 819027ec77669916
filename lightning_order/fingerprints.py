"""Content fingerprints of what a step read or produced: data of any shape, and tokenizers.

:func:`data_fingerprint` hashes plain Python data by content (tensors, arrays, containers,
map-style datasets item by item); :func:`tokenizer_fingerprint` hashes a tokenizer by its
serialised form, so two tokenizers with different vocabularies never share a fingerprint. The
recording API (:mod:`lightning_order.recording`), the LM ``build_vocab`` step and the validator
all use these two, so what is recorded and what is compared are computed the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from lightning_order.ledger import fingerprint

__all__ = ["data_fingerprint", "tokenizer_fingerprint"]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """The fingerprint of a tokenizer's serialised form (a ``tokenizers.Tokenizer`` or a fast HF one)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    return fingerprint("vocab", backend.to_str())


def data_fingerprint(value: Any) -> str:
    """A content fingerprint of plain Python data: equal content, equal fingerprint.

    Tensors and arrays hash their dtype, shape and bytes; dicts their sorted items; sequences,
    strings and numbers their values; a map-style dataset (``__len__`` + ``__getitem__``, e.g.
    ``torch.utils.data.Subset``) its items; a Hugging Face ``datasets.Dataset`` its own
    ``_fingerprint``. Anything else hashes its ``repr`` (which must not hold a memory address).

    Args:
        value: what a step read or produced.
    """
    hasher = xxhash.xxh3_128()
    _update(hasher, value, depth=0)
    return hasher.hexdigest()


def _update(hasher: Any, value: Any, depth: int) -> None:
    if depth > 64:
        raise ValueError("data_fingerprint: the value nests deeper than 64 levels")
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported: this module stays light
    if torch is not None and torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        hasher.update(f"nd{value.dtype}{value.shape}".encode())
        hasher.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (str, bytes, bytearray, int, float, bool, complex, type(None), np.generic)):
        hasher.update(f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, Mapping):
        hasher.update(f"map{len(value)}".encode())
        for key in sorted(value, key=repr):
            _update(hasher, key, depth + 1)
            _update(hasher, value[key], depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        hasher.update(f"seq{len(value)}".encode())
        for item in items:
            _update(hasher, item, depth + 1)
    elif isinstance(getattr(value, "_fingerprint", None), str):  # datasets.Dataset
        hasher.update(f"hf:{value._fingerprint}".encode())
    elif hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        hasher.update(f"seq{len(value)}".encode())  # a dataset hashes as the list of its items
        for i in range(len(value)):
            _update(hasher, value[i], depth + 1)
    else:
        text = repr(value)
        if " at 0x" in text:
            raise TypeError(
                f"data_fingerprint cannot hash a {type(value).__name__} by content (its repr holds a memory "
                "address); pass tensors, arrays, lists, dicts or a map-style dataset"
            )
        hasher.update(text.encode())

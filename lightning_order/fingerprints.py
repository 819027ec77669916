"""Content fingerprints of what a step read or produced: data of any shape, and tokenizers.

:func:`data_fingerprint` hashes plain Python data by content (tensors, arrays, containers,
map-style datasets item by item, pandas objects, dataclasses); :func:`tokenizer_fingerprint`
hashes a tokenizer by its serialised form, so two tokenizers with different vocabularies never
share a fingerprint. A tokenizer given to :func:`data_fingerprint` gets exactly its
:func:`tokenizer_fingerprint`: the recording API (:mod:`lightning_order.recorder`), the LM
``build_vocab`` step and the validator all compute the one value, so what is recorded and what is
compared never differ by construction.

What cannot be hashed by content is refused, never hashed by its ``repr``: a ``repr`` shows a
summary (a tokenizer's first settings, a table's first rows) or a memory address, so two objects
with different content would share a fingerprint and a recorded step could never see a change.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import json
import pathlib
import sys
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

from lightning_order.errors import FingerprintError
from lightning_order.ledger import fingerprint

__all__ = ["data_fingerprint", "is_tokenizer", "tokenizer_backend", "tokenizer_fingerprint"]

#: Types whose ``repr`` is their whole content (so hashing it is hashing the content).
_REPR_IS_CONTENT = (
    enum.Enum,
    pathlib.PurePath,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    decimal.Decimal,
    fractions.Fraction,
    range,
    slice,
    uuid.UUID,
    np.dtype,
)


def tokenizer_backend(value: Any) -> Any:
    """The object that holds ``value``'s vocabulary: a ``transformers`` fast tokenizer's
    ``backend_tokenizer``; the ``processor`` of a wrapper exposing ``encode`` / ``decode`` and
    ``eos_id`` / ``bos_id`` (litgpt's ``Tokenizer``, #48); else ``value`` itself."""
    backend = getattr(value, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if _is_wrapper(value):
        return value.processor
    return value


def _is_wrapper(value: Any) -> bool:
    return (
        callable(getattr(value, "encode", None))
        and callable(getattr(value, "decode", None))
        and (hasattr(value, "eos_id") or hasattr(value, "bos_id"))
        and hasattr(value, "processor")
    )


def is_tokenizer(value: Any) -> bool:
    """Whether ``value`` is a tokenizer :func:`tokenizer_fingerprint` reads: a ``tokenizers.Tokenizer``
    (``to_str``), a ``transformers`` tokenizer (fast: ``backend_tokenizer``; slow: ``get_vocab``), or a
    wrapper of a ``tokenizers.Tokenizer`` or SentencePiece model (:func:`tokenizer_backend`)."""
    if isinstance(value, type):
        return False
    if hasattr(value, "backend_tokenizer"):
        return True
    if _is_wrapper(value):
        backend = value.processor
        return callable(getattr(backend, "to_str", None)) or callable(
            getattr(backend, "serialized_model_proto", None)
        )
    if callable(getattr(value, "to_str", None)) and callable(getattr(value, "encode", None)):
        return True
    return callable(getattr(value, "get_vocab", None)) and callable(
        getattr(value, "convert_tokens_to_ids", None)
    )


def _serialised(backend: Any) -> str:
    """A ``tokenizers.Tokenizer``'s JSON without what changes no token id of a text.

    ``transformers`` switches truncation and padding on and leaves them set when it encodes with
    ``padding=``/``truncation=``, and wraps a tokenizer with a post-processor template that adds
    no token (``$A`` alone); the same tokenizer loaded with ``tokenizers`` or with ``transformers``
    then gets one fingerprint. A template that adds tokens (a BOS, a separator) is kept.
    """
    state = json.loads(str(backend.to_str()))
    state.pop("truncation", None)
    state.pop("padding", None)
    if _adds_nothing(state.get("post_processor")):
        state["post_processor"] = None
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


def _adds_nothing(processor: Any) -> bool:
    """Whether a post-processor is ``transformers``' template that leaves every sequence as it is."""
    if not isinstance(processor, Mapping) or processor.get("type") != "TemplateProcessing":
        return False
    if processor.get("special_tokens"):
        return False
    pieces = [*processor.get("single", []), *processor.get("pair", [])]
    return all(isinstance(p, Mapping) and set(p) == {"Sequence"} for p in pieces)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """The fingerprint of a tokenizer's serialised form: its vocabulary, merges, added and special tokens.

    One function for every tokenizer the validator reads: a ``tokenizers.Tokenizer`` and a
    ``transformers`` fast tokenizer (its ``backend_tokenizer``) hash their JSON (``to_str``) without
    the run-time truncation and padding settings, as does a wrapper of one (litgpt's ``Tokenizer``:
    its ``processor``); a slow ``transformers`` tokenizer hashes its
    vocabulary (``get_vocab``, added tokens included). A token added, removed or renumbered, or a
    tokenizer retrained at the same size, changes it.

    Args:
        tokenizer: the tokenizer.

    Raises:
        FingerprintError: (a ``TypeError``) ``tokenizer`` is none of the kinds above.
    """
    backend = tokenizer_backend(tokenizer)
    if callable(getattr(backend, "to_str", None)):
        return fingerprint("vocab", _serialised(backend))
    if callable(getattr(backend, "serialized_model_proto", None)):  # SentencePiece in a wrapper
        return fingerprint(
            "vocab", "sentencepiece", xxhash.xxh3_128_hexdigest(backend.serialized_model_proto())
        )
    vocab = getattr(tokenizer, "get_vocab", None)
    if callable(vocab):
        return fingerprint("vocab", type(tokenizer).__name__, sorted(vocab().items()))
    raise FingerprintError(
        f"tokenizer_fingerprint cannot read a {type(tokenizer).__name__}: pass a tokenizers.Tokenizer or a "
        "transformers tokenizer"
    )


def data_fingerprint(value: Any) -> str:
    """A content fingerprint of plain Python data: equal content, equal fingerprint.

    Tensors and arrays hash their dtype, shape and bytes; dicts their sorted items; sequences,
    strings and numbers their values; a map-style dataset (``__len__`` + ``__getitem__``, e.g.
    ``torch.utils.data.Subset``) its items; a Hugging Face ``datasets.Dataset`` its own
    ``_fingerprint``; a pandas ``DataFrame``/``Series`` its values, index and columns; a dataclass
    its fields; a tokenizer is :func:`tokenizer_fingerprint` (returned as is).

    Args:
        value: what a step read or produced.

    Raises:
        FingerprintError: (a ``TypeError``) ``value`` holds an object that can only be hashed by its ``repr`` (which shows
            a summary or a memory address, not the content); the message names its type. Pass its
            content instead, or a string that identifies it (e.g. a hash of its saved file).
    """
    if is_tokenizer(value):
        return tokenizer_fingerprint(value)
    hasher = xxhash.xxh3_128()
    _update(hasher, value, depth=0)
    return hasher.hexdigest()


def _update(hasher: Any, value: Any, depth: int) -> None:
    if depth > 64:
        raise ValueError("data_fingerprint: the value nests deeper than 64 levels")
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported: this module stays light
    pandas = sys.modules.get("pandas")
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
    elif is_tokenizer(value):
        hasher.update(f"tokenizer:{tokenizer_fingerprint(value)}".encode())
    elif pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series)):
        columns = list(value.columns) if isinstance(value, pandas.DataFrame) else [value.name]
        hasher.update(f"pandas{type(value).__name__}{value.shape}".encode())
        _update(hasher, [str(c) for c in columns], depth + 1)
        _update(hasher, [str(t) for t in np.atleast_1d(value.dtypes)], depth + 1)
        hasher.update(pandas.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
    elif isinstance(getattr(value, "_fingerprint", None), str):  # datasets.Dataset
        hasher.update(f"hf:{value._fingerprint}".encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        hasher.update(f"dataclass:{type(value).__qualname__}".encode())
        for field in dataclasses.fields(value):
            _update(hasher, field.name, depth + 1)
            _update(hasher, getattr(value, field.name), depth + 1)
    elif hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        hasher.update(f"seq{len(value)}".encode())  # a dataset hashes as the list of its items
        for i in range(len(value)):
            _update(hasher, value[i], depth + 1)
    elif isinstance(value, _REPR_IS_CONTENT) or isinstance(value, type):
        name = value.__qualname__ if isinstance(value, type) else repr(value)
        hasher.update(f"{type(value).__name__}:{name}".encode())
    elif torch is not None and isinstance(value, (torch.dtype, torch.device)):
        hasher.update(f"torch:{value}".encode())
    else:
        raise FingerprintError(_refusal(value))


def _refusal(value: Any) -> str:
    kind = type(value).__name__
    text = repr(value)
    why = (
        "its repr holds a memory address"
        if " at 0x" in text
        else "only its repr, which shows a summary, not the content (two different ones would share a fingerprint)"
    )
    return (
        f"data_fingerprint cannot hash a {type(value).__module__}.{kind} by content ({why}); pass its content "
        "(tensors, arrays, lists, dicts, strings, a map-style dataset), or a string that identifies it, e.g. a "
        "hash of its saved file (in a recording block: step.output = that string)"
    )

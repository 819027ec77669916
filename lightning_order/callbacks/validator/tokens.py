"""The token ids behind a split's windows, for the window-overlap check: no glue, no sampling.

Gathering only (the judgement is :mod:`lightning_order.checks.windows`). A nanoGPT-style
dataset reads windows of one flat token array (``train.bin`` as a memory map, or a tensor):
when a split's dataset holds a 1-D integer array whose first tokens are its first item's input
ids, that array *is* the split, and the check reads all of it in chunks (memory: one chunk).
Anything else (wrapped subsets, text, ragged rows) gives ``None`` and the item-level evidence
decides, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.items import is_label, leaf_array, leaves, split_dataset

__all__ = ["CHUNK_TOKENS", "chunks", "separator_ids", "split_stream"]

#: Train tokens hashed per chunk (64 MiB of uint64 hashes per pass at most).
CHUNK_TOKENS = 1 << 23


def _input_ids(item: Any) -> np.ndarray | None:
    """The first integer array leaf of an item that is not its label (a window's input ids)."""
    for path, leaf in leaves(item):
        array = leaf_array(leaf)
        if (
            not is_label(path)
            and array is not None
            and array.ndim == 1
            and np.issubdtype(array.dtype, np.integer)
        ):
            return array
    return None


def _as_array(value: Any) -> np.ndarray | None:
    if (
        torch.is_tensor(value)
        and value.ndim == 1
        and not value.is_floating_point()
        and value.device.type == "cpu"
    ):
        return value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 1 and np.issubdtype(value.dtype, np.integer):
        return value
    return None


def split_stream(dm: Any, split: str) -> tuple[np.ndarray, int] | None:
    """``(tokens, window)``: the flat token array a split's windows are cut from, and the window length.

    The array is accepted only when it is at least as long as the dataset and starts with the
    first item's input ids (so an index array or unrelated buffer is never taken for the data);
    the window is the item's input length plus one (the label's extra token).

    Returns:
        ``None`` when the split has no such array.
    """
    dataset, _ = split_dataset(dm, split) if dm is not None else (None, None)
    if dataset is None or not len(dataset):
        return None
    try:
        first = _input_ids(dataset[0])
    except Exception:  # an item that cannot be read by index: no stream
        return None
    if first is None or not first.size:
        return None
    for value in vars(dataset).values():
        tokens = _as_array(value)
        if tokens is None or tokens.size < len(dataset) or tokens.size < first.size:
            continue
        if np.array_equal(np.asarray(tokens[: first.size], dtype=np.int64), first.astype(np.int64)):
            return tokens, int(first.size) + 1
    return None


#: Token names that end or open a document, looked up when the tokenizer names none.
_SEPARATORS = ("<|endoftext|>", "</s>", "<s>", "<|end_of_text|>", "<|begin_of_text|>", "<eos>", "<bos>")


def separator_ids(dm: Any) -> tuple[int, ...]:
    """The ids of the datamodule tokenizer's end-of-text and BOS tokens (``dm.tokenizer``), or ``()``.

    A ``transformers`` tokenizer's ``eos_token_id`` / ``bos_token_id``, else the ids of the usual
    separator names its vocabulary declares (a ``tokenizers.Tokenizer`` too).
    """
    tokenizer = getattr(dm, "tokenizer", None)
    if tokenizer is None:
        return ()
    found = {getattr(tokenizer, name, None) for name in ("eos_token_id", "bos_token_id")}
    lookup = getattr(tokenizer, "token_to_id", None) or getattr(tokenizer, "convert_tokens_to_ids", None)
    unknown = getattr(tokenizer, "unk_token_id", None)
    for name in _SEPARATORS if lookup is not None else ():
        try:
            found.add(lookup(name))
        except Exception:  # a tokenizer that refuses unknown names: that name is no separator
            continue
    return tuple(sorted(int(i) for i in found if isinstance(i, int) and i != unknown))


def chunks(tokens: np.ndarray, size: int = CHUNK_TOKENS) -> Iterator[np.ndarray]:
    """Consecutive pieces of ``tokens`` (a memory map is read one piece at a time)."""
    for start in range(0, tokens.size, size):
        yield np.asarray(tokens[start : start + size])

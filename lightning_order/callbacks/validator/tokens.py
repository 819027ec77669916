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

from lightning_order.callbacks.validator.arrow_blocks import column_stream, table_blocks
from lightning_order.callbacks.validator.evidence import is_label, leaf_array, leaves, split_dataset
from lightning_order.callbacks.validator.peek import untouched

__all__ = ["CHUNK_TOKENS", "MAX_VAL_WINDOWS", "chunks", "separator_ids", "split_stream", "subset_windows"]

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
    found = _stream_of(dataset)
    if found is None:  # packed blocks in a datasets table: windows of the block length
        return None if _one_table(dm) else column_stream(dataset)
    return found[0], int(found[1].size) + 1


def _one_table(dm: Any) -> bool:
    """Both splits select rows of one table of blocks: the packed-split check judges, with the rows' places."""
    train, _ = split_dataset(dm, "train")
    val, _ = split_dataset(dm, "val")
    return table_blocks(train, val) is not None


def _item_ids(dataset: Any, index: int) -> np.ndarray | None:
    try:
        with untouched(dataset) as blocked:  # an item may draw random numbers or count its reads
            return _input_ids(dataset[index]) if blocked is None else None
    except Exception:  # an item that cannot be read by index: no stream
        return None


def _stream_of(dataset: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(tokens, first item's ids)`` when ``dataset`` holds the flat array its first item starts."""
    if dataset is None or not hasattr(dataset, "__dict__") or not len(dataset):
        return None
    first = _item_ids(dataset, 0)
    if first is None or not first.size:
        return None
    for value in vars(dataset).values():
        tokens = _as_array(value)
        if tokens is None or tokens.size < len(dataset) or tokens.size < first.size:
            continue
        if np.array_equal(np.asarray(tokens[: first.size], dtype=np.int64), first.astype(np.int64)):
            return tokens, first
    return None


#: Validation windows checked at most for a split made after packing (a uniform sample above).
MAX_VAL_WINDOWS = 100_000


def subset_windows(dm: Any) -> dict[str, Any] | None:
    """Both splits as subsets of one dataset of windows cut from one token stream, or ``None``.

    ``torch.utils.data.Subset`` (what ``random_split`` returns) of the same dataset on both
    sides, that dataset holding the flat token array (see :func:`split_stream`) and its item 1
    starting 1, ``window - 1`` or ``window`` tokens after item 0 (the stride); or two
    ``datasets.Dataset`` row selections of one table of packed blocks
    (:func:`~lightning_order.callbacks.validator.arrow_blocks.table_blocks`).

    Returns:
        ``{"stream", "train_starts", "val_starts", "window", "stride", "whole"}``: the stream
        offsets of every train window and of the validation windows checked (all of them, or a
        seeded sample of :data:`MAX_VAL_WINDOWS`).
    """
    train, _ = split_dataset(dm, "train") if dm is not None else (None, None)
    val, _ = split_dataset(dm, "val") if dm is not None else (None, None)
    subset = torch.utils.data.Subset
    if not isinstance(train, subset) and not isinstance(val, subset):  # datasets' own split (select)
        return table_blocks(train, val)
    if not isinstance(train, subset) or not isinstance(val, subset) or train.dataset is not val.dataset:
        return None
    base: Any = train.dataset
    found = _stream_of(base)
    second = _item_ids(base, 1) if found is not None and len(base) > 1 else None
    if found is None or second is None:
        return None
    tokens, first = found
    width = first.size
    stride = next(
        (
            s
            for s in (1, width, width + 1)
            if tokens.size >= s + width and np.array_equal(np.asarray(tokens[s : s + width]), second)
        ),
        None,
    )
    if stride is None:
        return None
    val_index = np.asarray(val.indices, dtype=np.int64)
    whole = val_index.size <= MAX_VAL_WINDOWS
    if not whole:
        val_index = np.random.default_rng(0).choice(val_index, size=MAX_VAL_WINDOWS, replace=False)
    return {
        "stream": tokens,
        "train_starts": np.asarray(train.indices, dtype=np.int64) * stride,
        "val_starts": val_index * stride,
        "window": width + 1,
        "stride": stride,
        "whole": whole,
    }


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
    # eos_id / bos_id: litgpt's Tokenizer (#48).
    found = {getattr(tokenizer, name, None) for name in ("eos_token_id", "bos_token_id", "eos_id", "bos_id")}
    lookup: Any = getattr(tokenizer, "token_to_id", None) or getattr(tokenizer, "convert_tokens_to_ids", None)
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

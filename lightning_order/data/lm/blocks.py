"""Token streams and blocks: documents encoded with one end-of-text id after each, cut into blocks, sharded.

From ``encode`` on, everything is numpy: ``tokenizer.encode_batch`` in Rust, then one int32
token stream per split with exactly one end-of-text id after each document, cut with
``reshape`` into blocks of ``block_size + 1`` tokens (inputs are ``block[:-1]``, labels
``block[1:]``), and sharded by striding so every rank gets the same number of blocks from across
the whole corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from lightning_order.errors import DataError

__all__ = ["TokenStream", "encode_documents", "pack_stream", "stride_shard"]

_ENCODE_BATCH = 1024


@dataclass(frozen=True)
class TokenStream:
    """One split encoded: the token ids of every document, each followed by its end-of-text id.

    Attributes:
        ids: int32, the concatenated documents (end-of-text ids included).
        ends: int64, the position in ``ids`` of each document's end-of-text id (or, without
            end-of-text, of its last token).
    """

    ids: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.ends)


def encode_documents(tokenizer: Tokenizer, docs: Sequence[str], eos_id: int | None) -> TokenStream:
    """Encodes ``docs`` in batches (Rust) into one int32 stream, ``eos_id`` after each document.

    Args:
        tokenizer: the tokenizer (no padding, no truncation).
        docs: the documents.
        eos_id: the end-of-text id, or ``None`` to concatenate without boundaries (a wrong order,
            for experiments).
    """
    chunks, lengths = [], []
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    for start in range(0, len(docs), _ENCODE_BATCH):
        for encoding in encode(list(docs[start : start + _ENCODE_BATCH]), add_special_tokens=False):
            chunks.append(np.asarray(encoding.ids, dtype=np.int32))
            lengths.append(len(encoding.ids))
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    extra = 0 if eos_id is None else 1
    ends = np.cumsum(lengths_arr + extra) - 1
    ids = np.empty(int(lengths_arr.sum()) + extra * len(lengths), dtype=np.int32)
    if eos_id is None:
        if chunks:
            ids[:] = np.concatenate(chunks)
        return TokenStream(ids, ends)
    is_eos = np.zeros(len(ids), dtype=bool)
    is_eos[ends] = True
    if chunks:
        body = np.concatenate(chunks)
        if (body == eos_id).any():
            raise DataError(
                f"a document encodes to the end-of-text id {eos_id} itself; its text holds the token's "
                "string in a form cleaning did not remove: clean it (override the clean step)",
                step="encode",
            )
        ids[~is_eos] = body
    ids[is_eos] = eos_id
    return TokenStream(ids, ends)


def pack_stream(ids: np.ndarray, block_size: int) -> tuple[np.ndarray, int]:
    """``ids`` cut into ``(n, block_size + 1)`` blocks (a view, no copy) and the tokens left over."""
    width = block_size + 1
    count = len(ids) // width
    return ids[: count * width].reshape(count, width), len(ids) - count * width


def stride_shard(count: int, world_size: int, rank: int) -> tuple[np.ndarray, int]:
    """The block indices of ``rank`` (``rank, rank + W, ...``, the same count on every rank) and the blocks dropped.

    Raises:
        DataError: fewer blocks than ranks (a rank would have nothing to train on).
    """
    per_rank = count // world_size
    if per_rank == 0:
        raise DataError(
            f"the train split packs into {count} blocks, fewer than the {world_size} ranks: every rank needs at "
            "least one block; lower block_size, use more documents, or fewer devices",
            step="shard",
        )
    return np.arange(rank, per_rank * world_size, world_size), count - per_rank * world_size

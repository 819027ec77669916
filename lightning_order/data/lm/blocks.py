"""Token streams and blocks: documents encoded with one end-of-text id after each, cut into blocks, sharded.

From ``encode`` on, everything is numpy: ``tokenizer.encode_batch`` in Rust, then one int32
token stream per split with exactly one end-of-text id after each document, cut with
``reshape`` into blocks of ``block_size + 1`` tokens (inputs are ``block[:-1]``, labels
``block[1:]``), and sharded by striding so every rank gets the same number of blocks from across
the whole corpus.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from lightning_order.data.lm.tokenizer import piece_loss, text_as_text, unknown_id
from lightning_order.errors import DataError

__all__ = [
    "MAX_PIECE_CHARS",
    "TokenStream",
    "encode_documents",
    "pieces",
    "stride_shard",
    "utf8_pieces",
]

#: Characters per encode call at most (a long document is encoded in pieces of about this size).
MAX_PIECE_CHARS = 1 << 17


@dataclass(frozen=True)
class TokenStream:
    """One split encoded: the token ids of every document, each followed by its end-of-text id.

    Attributes:
        ids: int32, the concatenated documents (end-of-text ids included).
        ends: int64, the position in ``ids`` of each document's end-of-text id (or, without
            end-of-text, of its last token).
        lost_characters, characters: the non-space characters no token covers (or that became
            the unknown token), and all of them (``0, 0`` unless measured).
        empty_documents: documents that encode to no token at all.
    """

    ids: np.ndarray
    ends: np.ndarray
    lost_characters: int = 0
    characters: int = 0
    empty_documents: int = 0

    def __len__(self) -> int:
        return len(self.ends)


def pieces(text: str, size: int = MAX_PIECE_CHARS) -> Iterator[str]:
    """``text`` cut into pieces of about ``size`` characters, each cut just before a whitespace run.

    A cut there is a boundary of the pre-tokenizer's own splits (a run of non-space characters
    ends at the whitespace), so the pieces encode to exactly the ids of the whole text. Only a
    run of more than ``size`` non-space characters is cut inside (at ``size``), where the ids
    near the cut may differ from the whole text's. Made one at a time.
    """
    start = 0
    while len(text) - start > size:
        cut = start + size
        back = cut
        while back > start and not (text[back].isspace() and not text[back - 1].isspace()):
            back -= 1
        cut = back if back > start else cut
        yield text[start:cut]
        start = cut
    yield text[start:]


_ASCII_SPACE = b" \t\n\r\x0b\x0c"


def utf8_pieces(data: memoryview, size: int = MAX_PIECE_CHARS) -> Iterator[str]:
    """The text whose UTF-8 bytes are ``data``, decoded in pieces of at most ``size`` bytes.

    The same rule as :func:`pieces`, on bytes: each cut is just before a run of ASCII whitespace
    (whitespace for every pre-tokenizer, and never inside a multi-byte character), or, inside a
    longer run of other characters, at a character boundary. The whole text is never decoded
    (a Python string of it may take four bytes a character): one piece is.
    """
    start, end = 0, len(data)
    while end - start > size:
        window = bytes(data[start : start + size + 1])
        cut = max(window.rfind(c) for c in _ASCII_SPACE)  # the last whitespace byte up to start + size
        while cut > 0 and window[cut - 1] in _ASCII_SPACE:
            cut -= 1  # to the start of its run
        if cut <= 0:  # no whitespace after a word: a hard cut, at a character boundary
            cut = size
            while cut > 0 and window[cut] & 0xC0 == 0x80:
                cut -= 1
        yield window[:cut].decode("utf-8")
        start += cut
    yield bytes(data[start:end]).decode("utf-8")


def _document_pieces(docs: Sequence[str]) -> Iterator[tuple[int, str]]:
    """``(document index, piece)`` of every document, a long one in pieces (from its UTF-8 bytes where
    ``docs`` can give them, e.g. a :class:`~lightning_order.data.engine.partitions.TextColumn`)."""
    views = getattr(docs, "utf8_views", None)
    if views is None:
        for index, doc in enumerate(docs):
            for piece in pieces(doc):
                yield index, piece
        return
    for index, data in enumerate(views()):
        for piece in utf8_pieces(data):
            yield index, piece


def _batches(docs: Sequence[str]) -> Iterator[tuple[list[int], list[str]]]:
    """``(document index per piece, pieces)`` batches of at most about ``MAX_PIECE_CHARS`` characters each.

    Made as they are encoded: a long document's pieces are never all held at once.
    """
    owners: list[int] = []
    texts: list[str] = []
    chars = 0
    for index, piece in _document_pieces(docs):
        if texts and chars + len(piece) > MAX_PIECE_CHARS:
            yield owners, texts
            owners, texts, chars = [], [], 0
        owners.append(index)
        texts.append(piece)
        chars += len(piece)
    if texts:
        yield owners, texts


def encode_documents(
    tokenizer: Tokenizer,
    docs: Sequence[str],
    eos_id: int | None,
    *,
    where: str = "",
    vocab_size: int | None = None,
    measure_loss: bool = False,
    bos_id: int | None = None,
) -> TokenStream:
    """Encodes ``docs`` into one int32 stream, ``eos_id`` after each document, in bounded pieces.

    Documents are encoded (in Rust) in batches of at most about :data:`MAX_PIECE_CHARS`
    characters, a long document in pieces (:func:`pieces`, the same ids), so one huge document
    costs a small multiple of its size, not the ``Encoding`` objects of the whole of it. Special
    tokens written in a document's text are encoded as ordinary text
    (:func:`~.tokenizer.text_as_text`): the only special id a document gets is ``eos_id``.

    Args:
        tokenizer: the tokenizer (no padding, no truncation).
        docs: the documents.
        eos_id: the end-of-text id, or ``None`` to concatenate without boundaries (a wrong order,
            for experiments).
        where: names the documents in an error (e.g. ``"train split, file 3"``).
        vocab_size: refuse an id at or above it (a tokenizer whose ids exceed its size).
        measure_loss: count the characters no token covers (a supplied tokenizer may lose
            some; a byte-level BPE never does, and is not measured).
        bos_id: the id put before every document (``None``: none; :mod:`~.bos`).

    Raises:
        DataError: a document encodes to the end-of-text id itself (naming it), or an id is not
            below ``vocab_size``.
    """
    with text_as_text(tokenizer):
        return _encode(tokenizer, docs, eos_id, where, vocab_size, measure_loss, bos_id)


def _encode(
    tokenizer: Tokenizer,
    docs: Sequence[str],
    eos_id: int | None,
    where: str,
    vocab_size: int | None,
    measure_loss: bool,
    bos_id: int | None = None,
) -> TokenStream:
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    if measure_loss:  # the fast path gives no offsets
        encode = tokenizer.encode_batch
    unk_id = unknown_id(tokenizer)
    lengths = np.zeros(len(docs), dtype=np.int64)
    chunks: list[np.ndarray] = []  # each document's pieces, then its end-of-text id
    eos = np.array([] if eos_id is None else [eos_id], dtype=np.int32)
    bos = np.array([] if bos_id is None else [bos_id], dtype=np.int32)
    opened = -1  # the last document whose BOS is in chunks (every document yields a piece)
    done = 0  # documents whose end-of-text id is in chunks
    highest = -1
    lost = characters = 0
    for owners, texts in _batches(docs):
        for owner, encoding, text in zip(owners, encode(texts, add_special_tokens=False), texts):
            while done < owner:
                chunks.append(eos)
                done += 1
            if owner != opened:
                chunks.append(bos)
                opened = owner
            ids = np.asarray(encoding.ids, dtype=np.int32)
            if measure_loss:
                found = piece_loss(ids, encoding.offsets, text, unk_id)
                lost, characters = lost + found[0], characters + found[1]
            if len(ids):
                highest = max(highest, int(ids.max()))
                if eos_id is not None and (ids == eos_id).any():
                    raise DataError(
                        f"document {owner} ({where or 'this split'}: {docs[owner][:60]!r}...) encodes to the "
                        f"end-of-text id {eos_id} from its ordinary text (the tokenizer's vocabulary holds the "
                        "token as a piece of text): use a tokenizer that declares it only as a special token",
                        step="encode",
                    )
            chunks.append(ids)
            lengths[owner] += len(ids)
    chunks.extend([eos] * (len(docs) - done))
    if vocab_size is not None and highest >= vocab_size:
        raise DataError(
            f"the tokenizer gives id {highest} ({where or 'this split'}), not below its vocab_size "
            f"{vocab_size}: an id beyond the model's table; use a tokenizer whose ids are all below its size",
            step="encode",
        )
    ends = np.cumsum(lengths + len(bos) + len(eos)) - 1
    ids = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int32)
    return TokenStream(ids, ends, lost, characters, int((lengths == 0).sum()))


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

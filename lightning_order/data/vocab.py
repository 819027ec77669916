"""Step 6, ``build_vocab``: a WordPiece or BPE vocabulary trained with ``tokenizers``.

The tokenizer is trained from an iterator over batches of the text (the cleaned train text when
the order is right), so the corpus is never held in memory as one list. The special tokens are
added first and protected (``[PAD]`` has id 0, as the batch contract needs), so training can
neither split nor renumber them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from lightning_order.data.steps import ROWS, STEPS, DataState, StepContext, StepResult, train_data
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = [
    "SPECIAL_TOKENS",
    "TOKENIZERS",
    "build_vocab",
    "check_vocab_size",
    "text_alphabet",
    "text_batches",
    "train_tokenizer",
]

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZERS: tuple[str, ...] = ("wordpiece", "bpe")


def check_vocab_size(vocab_size: int) -> None:
    """Raises :class:`DataError` when ``vocab_size`` cannot hold the special tokens."""
    if not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_TOKENS):
        raise DataError(
            f"vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens "
            f"({', '.join(SPECIAL_TOKENS)}), got {vocab_size!r}; use e.g. vocab_size=8000",
            step="build_vocab",
        )


def text_batches(dataset: Any, column: str, batch_size: int = 2048) -> Iterator[list[str]]:
    """Yields the column's values in batches (lists of strings) without loading the whole column."""
    for batch in dataset.select_columns([column]).iter(batch_size=batch_size):
        yield batch[column]


def text_alphabet(dataset: Any, column: str, batch_size: int = 65536) -> set[str]:
    """The set of characters in a string column, read from the Arrow buffers.

    ASCII rows are counted byte-wise with numpy (no Python per row); only rows with other
    characters are decoded.
    """
    counts = np.zeros(256, dtype=np.int64)
    alphabet: set[str] = set()
    for batch in dataset.select_columns([column]).with_format("arrow").iter(batch_size=batch_size):
        values = batch[column]
        chunks = values.chunks if hasattr(values, "chunks") else [values]
        for chunk in chunks:
            if len(chunk) == 0:
                continue
            ascii_rows = pc.string_is_ascii(chunk)
            plain = chunk.filter(ascii_rows)
            if len(plain):
                offsets_type = np.int64 if pa.types.is_large_string(plain.type) else np.int32
                offsets = np.frombuffer(plain.buffers()[1], dtype=offsets_type)[
                    plain.offset : plain.offset + len(plain) + 1
                ]
                data = np.frombuffer(plain.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
                counts += np.bincount(data, minlength=256)
            other = chunk.filter(pc.invert(ascii_rows))
            if len(other):
                alphabet.update("".join(v for v in other.to_pylist() if v))
    alphabet.update(chr(b) for b in np.flatnonzero(counts))
    return alphabet


def train_tokenizer(
    batches: Iterable[list[str]] | Callable[[], Iterable[list[str]]],
    vocab_size: int,
    kind: str = "wordpiece",
    length: int | None = None,
    alphabet: set[str] | None = None,
) -> Tokenizer:
    """Trains a tokenizer, deterministically.

    ``tokenizers``' WordPiece trainer numbers its ``##``-continuation symbols in hash-map order,
    and merges with equal counts are then broken by those numbers, so two trainings on the same
    text can differ (huggingface/tokenizers#1794). We fix the numbering: a first pass collects the
    alphabet, every ``##<char>`` symbol is seeded (sorted) before training, and the trained
    vocabulary is rebuilt into a plain WordPiece model with only the real special tokens. A cache
    rebuilt after a crash is then identical to the first one.

    Args:
        batches: lists of texts, or (for WordPiece) a callable returning a fresh iterator of
            them, since the alphabet needs a first pass.
        vocab_size: the target vocabulary size, special tokens included.
        kind: ``"wordpiece"`` or ``"bpe"``.
        length: the number of texts (for progress reporting only).
        alphabet: the characters of the texts, when already known (see :func:`text_alphabet`);
            otherwise a first pass over ``batches`` collects them.

    Returns:
        The trained :class:`tokenizers.Tokenizer` (BERT pre-tokenizer: whitespace and
        punctuation); ``[PAD]`` has id 0.
    """
    check_vocab_size(vocab_size)
    specials = list(SPECIAL_TOKENS)
    make = batches if callable(batches) else None
    if kind == "wordpiece":
        seeds: list[str] = []
        if alphabet is None and make is not None:
            alphabet = set()
            for batch in make():
                alphabet.update("".join(batch))
        if alphabet is not None:
            seeds = [f"##{c}" for c in sorted(alphabet) if not c.isspace()]
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=specials + seeds, show_progress=False
        )
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    elif kind == "bpe":
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    else:
        raise DataError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {kind!r}", step="build_vocab")
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(make() if make is not None else batches, trainer=trainer, length=length)
    if kind == "wordpiece" and seeds:
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        rebuilt = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        rebuilt.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        rebuilt.add_special_tokens(specials)
        tokenizer = rebuilt
    if kind == "wordpiece":
        tokenizer.decoder = decoders.WordPiece()
    return tokenizer


@STEPS.register("build_vocab", takes=ROWS, consumes=("clean",), reads="train")
def build_vocab(ctx: StepContext, state: DataState) -> StepResult:
    """Step 6: trains the tokenizer on the text it is given (the cleaned train split)."""
    cfg = ctx.config
    source = train_data(state)
    column = cfg.text_column
    tokenizer = train_tokenizer(
        lambda: text_batches(source, column),
        cfg.vocab_size,
        cfg.tokenizer,
        length=len(source),
        alphabet=text_alphabet(source, column) if cfg.tokenizer == "wordpiece" else None,
    )
    return StepResult(
        replace(state, tokenizer=tokenizer),
        fingerprint("vocab", tokenizer.to_str()),
        params={"vocab_size": cfg.vocab_size, "tokenizer": cfg.tokenizer},
        stats={"vocab_size": tokenizer.get_vocab_size(), "rows": len(source)},
    )

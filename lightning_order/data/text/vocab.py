"""Step 6, ``build_vocab``: a WordPiece or BPE vocabulary trained with ``tokenizers``.

The tokenizer is trained from an iterator over batches of the text (the cleaned train text when
the order is right), so the corpus is never held in memory as one list. The special tokens are
added first and protected (``[PAD]`` has id 0, as the batch contract needs), so training can
neither split nor renumber them.

Work stays linear in a row's length, however hostile the text: the pre-tokenizer
(:func:`bounded_pre_tokenizer`) splits on whitespace and punctuation, then cuts any run of
more than :data:`MAX_WORD_CHARS` characters into pieces of at most that length, so one 5 MB
"word" without spaces costs training and encoding what 50 000 ordinary words cost (before, the
trainer's merges were quadratic in the word's length). The tokenizer saves its pre-tokenizer,
so encoding cuts the same way. :func:`encode_bounded` encodes a long row from a prefix long enough
for ``max_length`` tokens (checked exact, else the whole row), so encoding a row costs what its
kept tokens cost, not its length; and ``build_vocab`` learns from the first :func:`train_chars`
characters of each row (at least 64 Ki, and all that encoding can reach), so one huge row costs
training what 64 Ki characters cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult, train_data
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = [
    "MAX_WORD_CHARS",
    "SPECIAL_TOKENS",
    "TOKENIZERS",
    "bounded_pre_tokenizer",
    "build_vocab",
    "check_vocab_size",
    "encode_bounded",
    "text_alphabet",
    "text_batches",
    "train_chars",
    "train_tokenizer",
]

SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZERS: tuple[str, ...] = ("wordpiece", "bpe")
#: The longest piece the pre-tokenizer passes on (WordPiece maps longer words to ``[UNK]`` anyway).
MAX_WORD_CHARS = 100


def bounded_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """BERT pre-tokenization (whitespace, punctuation), then runs over :data:`MAX_WORD_CHARS` cut into pieces."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.BertPreTokenizer(),
            pre_tokenizers.Split(Regex(rf"\S{{1,{MAX_WORD_CHARS}}}"), behavior="isolated"),
        ]
    )


def encode_bounded(tokenizer: Tokenizer, texts: list[str], max_length: int) -> list[Any]:
    """``tokenizer.encode_batch(texts, add_special_tokens=False)``, the same ids, without encoding what truncation drops.

    ``tokenizer`` must truncate to ``max_length`` (else every text is encoded whole). A text longer
    than ``limit = (max_length + 1) * (MAX_WORD_CHARS + 1) + MAX_WORD_CHARS`` characters is encoded
    from its first ``limit`` characters: every pre-token (at most :data:`MAX_WORD_CHARS` long)
    except the last, which the cut may shorten, is the same as in the whole text, so when the
    ``max_length`` kept tokens all end before ``limit - MAX_WORD_CHARS`` they are exactly the
    tokens of the whole text. Otherwise (a prefix mostly of whitespace) the whole text is encoded.

    Returns:
        One :class:`tokenizers.Encoding` per text.
    """
    truncation = tokenizer.truncation
    limit = (max_length + 1) * (MAX_WORD_CHARS + 1) + MAX_WORD_CHARS
    long = [i for i, text in enumerate(texts) if isinstance(text, str) and len(text) > limit]
    if not long or not truncation or truncation["max_length"] > max_length:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    clipped = list(texts)
    for i in long:
        clipped[i] = texts[i][:limit]
    encodings = tokenizer.encode_batch(clipped, add_special_tokens=False)
    redo = []
    for i in long:
        ends = [end for (_, end), keep in zip(encodings[i].offsets, encodings[i].attention_mask) if keep]
        if len(ends) < truncation["max_length"] or ends[-1] > limit - MAX_WORD_CHARS:
            redo.append(i)
    if redo:
        for i, encoding in zip(
            redo, tokenizer.encode_batch([texts[i] for i in redo], add_special_tokens=False)
        ):
            encodings[i] = encoding
    return encodings


def check_vocab_size(vocab_size: int) -> None:
    """Raises :class:`DataError` when ``vocab_size`` is not an int or cannot hold the special tokens."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise DataError(
            f"vocab_size must be an int, got {vocab_size!r} ({type(vocab_size).__name__}); "
            f"use e.g. vocab_size={int(vocab_size) if isinstance(vocab_size, float) and vocab_size.is_integer() else 8000}",
            step="build_vocab",
        )
    if vocab_size <= len(SPECIAL_TOKENS):
        raise DataError(
            f"vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens "
            f"({', '.join(SPECIAL_TOKENS)}), got {vocab_size!r}; use e.g. vocab_size=8000",
            step="build_vocab",
        )


def text_batches(
    dataset: Any, column: str, batch_size: int = 2048, max_chars: int | None = None
) -> Iterator[list[str]]:
    """Yields the column's values in batches (lists of strings) without loading the whole column.

    Args:
        dataset: the rows.
        column: the text column.
        batch_size: rows per batch.
        max_chars: each text is cut to its first ``max_chars`` characters (``None``: whole).
    """
    from lightning_order.data.engine.tables import batches  # Arrow slices: no datasets formatting per batch

    for table in batches(dataset, [column], batch_size):
        texts = table[column].to_pylist()
        if max_chars is not None:
            texts = [t[:max_chars] if isinstance(t, str) and len(t) > max_chars else t for t in texts]
        yield texts


def train_chars(max_length: int) -> int:
    """The characters of each row ``build_vocab`` learns from: at least 65 536, and always every
    character :func:`encode_bounded` can reach for ``max_length`` tokens (text past it is never encoded)."""
    return max(1 << 16, (max_length + 1) * (MAX_WORD_CHARS + 1) + MAX_WORD_CHARS)


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
        The trained :class:`tokenizers.Tokenizer` (:func:`bounded_pre_tokenizer`: whitespace,
        punctuation, runs over :data:`MAX_WORD_CHARS` cut); ``[PAD]`` has id 0.
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
    tokenizer.pre_tokenizer = bounded_pre_tokenizer()
    tokenizer.train_from_iterator(make() if make is not None else batches, trainer=trainer, length=length)
    if kind == "wordpiece" and seeds:
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        rebuilt = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        rebuilt.pre_tokenizer = bounded_pre_tokenizer()
        rebuilt.add_special_tokens(specials)
        tokenizer = rebuilt
    if kind == "wordpiece":
        tokenizer.decoder = decoders.WordPiece()
    return tokenizer


@STEPS.register(
    "build_vocab",
    takes=ROWS,
    provides=("tokenizer",),
    consumes=("clean",),
    reads="train",
    config=("text_column", "vocab_size", "tokenizer", "max_length"),
    output="content",  # the tokenizer's fingerprint: the validator compares it with the one in use
)
def build_vocab(ctx: StepContext, state: DataState) -> StepResult:
    """Step 6: trains the tokenizer on the text it is given (the cleaned train split)."""
    cfg = ctx.config
    source = train_data(state)
    column = cfg.text_column
    tokenizer = train_tokenizer(
        lambda: text_batches(source, column, max_chars=train_chars(cfg.max_length)),
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

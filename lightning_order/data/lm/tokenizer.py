"""The LM tokenizer: a byte-level BPE trained on the train documents, or a supplied ``tokenizer.json``.

Work stays linear in a document's length, however hostile the text: the pre-tokenizer first
cuts runs of more than :data:`~lightning_order.data.text.vocab.MAX_WORD_CHARS` non-space
characters, and training learns from at most the first :data:`TRAIN_CHARS` characters of each
document. The end-of-text token is declared here, as a special token, and nowhere later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from lightning_order.data.lm.config import EOS_TOKEN
from lightning_order.data.text.vocab import MAX_WORD_CHARS
from lightning_order.errors import DataError

__all__ = [
    "MAX_CHARACTER_LOSS",
    "TRAIN_CHARS",
    "SuppliedTokenizer",
    "bounded_byte_level",
    "character_loss",
    "check_encode_loss",
    "parse_tokenizer",
    "piece_loss",
    "read_tokenizer",
    "text_as_text",
    "train_byte_bpe",
    "unknown_id",
]

#: The characters of each document ``build_vocab`` learns from at most (a cost bound, not a filter).
TRAIN_CHARS = 1 << 16
#: The largest share of characters a supplied tokenizer may lose (no unknown token, no byte fallback).
MAX_CHARACTER_LOSS = 1e-3


def bounded_byte_level() -> pre_tokenizers.PreTokenizer:
    """Runs of non-space characters cut at :data:`MAX_WORD_CHARS` (a leading space kept), then GPT-2 byte level."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(rf"\s?\S{{1,{MAX_WORD_CHARS}}}|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _train_batches(docs: Iterable[str], size: int = 2048) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in docs:
        batch.append(doc[:TRAIN_CHARS])
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def train_byte_bpe(
    docs: Iterable[str],
    vocab_size: int,
    eos_token: str = EOS_TOKEN,
    length: int | None = None,
    bos_token: str | None = None,
) -> Tokenizer:
    """A byte-level BPE trained on ``docs``; ``eos_token`` is id 0, declared here and nowhere later.

    Args:
        docs: the documents (any iterable: read once, at most :data:`TRAIN_CHARS` of each).
        vocab_size: the target size, the special tokens included.
        eos_token: the end-of-text token.
        length: how many documents, when ``docs`` has no ``len`` (for the trainer's progress).
        bos_token: a beginning-of-document token to declare too (id 1), or ``None``.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = bounded_byte_level()
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[eos_token, *([bos_token] if bos_token else [])],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    count = length if length is not None else (len(docs) if isinstance(docs, Sized) else None)
    tokenizer.train_from_iterator(_train_batches(docs), trainer=trainer, length=count)
    return tokenizer


@dataclass(frozen=True)
class SuppliedTokenizer:
    """A ``tokenizer.json`` read once: the tokenizer parsed from exactly the bytes that were hashed.

    Attributes:
        tokenizer: the tokenizer, truncation and padding switched off.
        digest: the xxh3-128 of the bytes parsed.
        switched_off: the settings it came with that the pipeline switched off (``truncation``,
            ``padding``): they would cut or pad every document.
    """

    tokenizer: Tokenizer
    digest: str
    switched_off: tuple[str, ...]


def read_tokenizer(path: str, eos_token: str = EOS_TOKEN, digest: str | None = None) -> SuppliedTokenizer:
    """Reads ``path`` once, checks it is usable as the pipeline needs it, and returns it with its hash.

    Args:
        path: the ``tokenizer.json``.
        eos_token: the end-of-text token it must hold.
        digest: the hash the cache key was made from (``None``: not checked): a file rewritten
            since is refused, never used under the old key.

    Raises:
        DataError: unreadable, changed since the DataModule was built, no end-of-text token, or
            an id not below its size.
    """
    file = Path(path).expanduser()
    try:
        data = file.read_bytes()
    except OSError as err:
        raise DataError(
            f"tokenizer_file {path!r} cannot be read ({err.strerror})", step="build_vocab"
        ) from err
    found = xxhash.xxh3_128_hexdigest(data)
    if digest is not None and found != digest:
        raise DataError(
            f"tokenizer_file {path!r} changed after the DataModule was built (the cache key names its old "
            "content): build the DataModule again once the file stays as it is",
            step="build_vocab",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"tokenizer_file {path!r} is not a readable tokenizer.json (not UTF-8); save it with Tokenizer.save(), "
            "or pass tokenizer_file=None to train one",
            step="build_vocab",
        ) from err
    return parse_tokenizer(text, found, eos_token, f"tokenizer_file {path!r}")


def parse_tokenizer(text: str, digest: str, eos_token: str, label: str) -> SuppliedTokenizer:
    """A supplied tokenizer's ``tokenizer.json`` text parsed and checked as the pipeline needs it.

    Args:
        text: the ``tokenizer.json`` content.
        digest: its content hash (recorded).
        eos_token: the end-of-text token it must hold as a special token.
        label: how messages name it (``tokenizer_file '<path>'``, ``tokenizer '<folder>'``).

    Raises:
        DataError: unparsable, no end-of-text special token, an unknown token its model names but
            does not hold, or an id not below its size.
    """
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as err:  # tokenizers raises a bare Exception on a corrupt file
        raise DataError(
            f"{label} is not a readable tokenizer.json ({type(err).__name__}: {str(err)[:120]}); "
            "save it with Tokenizer.save(), or pass tokenizer_file=None to train one",
            step="build_vocab",
        ) from err
    switched_off = []
    if tokenizer.truncation is not None:
        tokenizer.no_truncation()
        switched_off.append("truncation")
    if tokenizer.padding is not None:
        tokenizer.no_padding()
        switched_off.append("padding")
    eos_id = tokenizer.token_to_id(eos_token)
    if eos_id is None:
        raise DataError(
            f"{label} has no end-of-text token {eos_token!r}: documents could not be "
            f"separated when packed; pass its own end-of-text token as eos_token= (e.g. '</s>'), or add it "
            f"as a special token before saving (tokenizer.add_special_tokens([{eos_token!r}])), or train one "
            "(tokenizer_file=None)",
            step="build_vocab",
        )
    _check_eos_is_special(tokenizer, eos_token, label)
    _check_unknown_in_vocabulary(tokenizer, label)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    top = max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1)
    if top >= size or eos_id >= size:
        raise DataError(
            f"{label} gives id {max(top, eos_id)} but holds {size} tokens: ids must be below its "
            "size (the model's table is sized from it); re-save the tokenizer with contiguous ids",
            step="build_vocab",
        )
    return SuppliedTokenizer(tokenizer, digest, tuple(switched_off))


def _check_eos_is_special(tokenizer: Tokenizer, eos_token: str, label: str) -> None:
    """The end-of-text token must be one of the tokenizer's special tokens, never an ordinary piece of text."""
    added = {t.content: t.special for t in tokenizer.get_added_tokens_decoder().values()}
    if not added.get(eos_token, False):
        kind = (
            "an added token that is not special"
            if eos_token in added
            else "an ordinary token of its vocabulary"
        )
        raise DataError(
            f"eos_token {eos_token!r} is {kind} in {label}: text could encode to it and "
            "documents could not be told apart from it; pass the tokenizer's own end-of-text special token "
            f"as eos_token= (its special tokens: {sorted(k for k, v in added.items() if v)[:8]}), or declare it "
            f"with tokenizer.add_special_tokens([{eos_token!r}]) before saving",
            step="build_vocab",
        )


def _check_unknown_in_vocabulary(tokenizer: Tokenizer, label: str) -> None:
    """A model that names an unknown token must hold it: else the first word it does not know raises.

    ``tokenizers`` raises a bare ``Exception`` there (``WordLevel error: Missing [UNK] token from
    the vocabulary``), in the middle of ``encode``; an added token does not help, as the model looks
    the unknown token up in its own vocabulary.
    """
    unknown = getattr(tokenizer.model, "unk_token", None)
    if unknown is None or (unknown and tokenizer.model.token_to_id(unknown) is not None):
        return  # none named (a BPE, a Unigram model), or held
    kind = type(tokenizer.model).__name__
    trainer = {"BPE": "BpeTrainer"}.get(kind, f"{kind}Trainer")  # WordLevelTrainer, WordPieceTrainer
    missing = (
        f"whose unknown token {unknown!r} is not in its vocabulary" if unknown else "with no unknown token"
    )
    token = unknown or "[UNK]"
    raise DataError(
        f"{label} has a {kind} model {missing}: the first word it does not know cannot be encoded; train "
        f"it with an unknown token in its vocabulary (e.g. {kind}(unk_token={token!r}) and "
        f"{trainer}(special_tokens=[{token!r}, ...])), use a tokenizer that covers the text (a byte-level "
        "BPE, or one with byte_fallback), or tokenizer_file=None to train one",
        step="build_vocab",
    )


@contextmanager
def text_as_text(tokenizer: Tokenizer) -> Iterator[Tokenizer]:
    """``tokenizer`` with special tokens written in the text encoded as ordinary text, restored after.

    Documents may hold ``<s>``, ``<|im_start|>`` or the end-of-text marker literally (chat logs,
    scraped markup); ``add_special_tokens=False`` does not stop the tokenizer from matching them
    to their control ids. In "split special tokens" mode (``encode_special_tokens``, tokenizers
    0.15+) the literal text is split into ordinary tokens, so the only special ids in the data
    are the ones ``encode`` puts there. The tokenizer handed to users is left as it was.
    """
    before = tokenizer.encode_special_tokens
    tokenizer.encode_special_tokens = True
    try:
        yield tokenizer
    finally:
        tokenizer.encode_special_tokens = before


def unknown_id(tokenizer: Tokenizer) -> int | None:
    """The id of the tokenizer model's unknown token (``None``: it has none)."""
    unknown = getattr(tokenizer.model, "unk_token", None)
    return tokenizer.token_to_id(unknown) if unknown else None


#: Every whitespace code point (``str.isspace``): none lies above U+3000.
_SPACES = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def piece_loss(
    ids: Sequence[int], offsets: Sequence[tuple[int, int]], text: str, unk_id: int | None
) -> tuple[int, int]:
    """``(lost, total)`` non-space characters of ``text`` not covered by a token of its encoding.

    A character is lost when no token covers it (a model without an unknown token or byte
    fallback drops it) or when it became the unknown token.
    """
    if not text:
        return 0, 0
    covered = np.zeros(len(text) + 1, dtype=np.int32)
    if len(ids):
        spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        keep = spans[:, 1] > spans[:, 0]
        if unk_id is not None:
            keep &= np.asarray(ids) != unk_id
        np.add.at(covered, spans[keep, 0], 1)
        np.add.at(covered, np.minimum(spans[keep, 1], len(text)), -1)
    inside = np.cumsum(covered)[: len(text)] > 0
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    visible = ~np.isin(codes, _SPACES)
    return int((visible & ~inside).sum()), int(visible.sum())


def character_loss(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[int, int]:
    """``(lost, total)`` non-space characters of ``texts`` that ``tokenizer`` does not encode (see :func:`piece_loss`).

    Special tokens written in the text count as text (:func:`text_as_text`). A byte-level BPE loses none.
    """
    unk_id = unknown_id(tokenizer)
    lost = total = 0
    with text_as_text(tokenizer):
        encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    for encoding, text in zip(encodings, texts):
        found = piece_loss(encoding.ids, encoding.offsets, text, unk_id)
        lost, total = lost + found[0], total + found[1]
    return lost, total


def check_encode_loss(tokenizer_file: str | None, split: str, found: dict[str, int]) -> None:
    """Refuses a split of which more than :data:`MAX_CHARACTER_LOSS` of the characters were not encoded.

    Args:
        tokenizer_file: the supplied tokenizer (named in the message).
        split: the split's name (``"train"``, ``"val"``).
        found: ``lost_characters``, ``characters``, ``empty_documents`` and ``documents`` of the split.

    Raises:
        DataError: (step ``encode``) past the threshold, naming the split, the counts and the fix.
    """
    lost, total = found["lost_characters"], found["characters"]
    if not total or lost / total <= MAX_CHARACTER_LOSS:
        return
    raise DataError(
        f"tokenizer_file {tokenizer_file!r} cannot encode {lost} of {total} characters of the {split} split "
        f"({lost / total:.2%}, more than the {MAX_CHARACTER_LOSS:.1%} allowed; {found['empty_documents']} "
        f"documents of {found['documents']} encode to nothing): they would vanish from the data or become the "
        "unknown token; use a tokenizer that covers the text (a byte-level BPE, or one with byte_fallback), "
        "or tokenizer_file=None to train one",
        step="encode",
    )

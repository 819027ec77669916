"""The LM tokenizer: a byte-level BPE trained on the train documents, or a supplied ``tokenizer.json``.

Work stays linear in a document's length, however hostile the text: the pre-tokenizer first
cuts runs of more than :data:`~lightning_order.data.text.vocab.MAX_WORD_CHARS` non-space
characters, and training learns from at most the first :data:`TRAIN_CHARS` characters of each
document. The end-of-text token is declared here, as a special token, and nowhere later.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from lightning_order.data.lm.config import EOS_TOKEN
from lightning_order.data.text.vocab import MAX_WORD_CHARS
from lightning_order.errors import DataError

__all__ = ["TRAIN_CHARS", "bounded_byte_level", "read_tokenizer", "train_byte_bpe"]

#: The characters of each document ``build_vocab`` learns from at most (a cost bound, not a filter).
TRAIN_CHARS = 1 << 16


def bounded_byte_level() -> pre_tokenizers.PreTokenizer:
    """Runs of non-space characters cut at :data:`MAX_WORD_CHARS` (a leading space kept), then GPT-2 byte level."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(rf"\s?\S{{1,{MAX_WORD_CHARS}}}|\s+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _train_batches(docs: Sequence[str], size: int = 2048) -> Iterator[list[str]]:
    for start in range(0, len(docs), size):
        yield [d[:TRAIN_CHARS] for d in docs[start : start + size]]


def train_byte_bpe(docs: Sequence[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE trained on ``docs``; :data:`EOS_TOKEN` is id 0, declared here and nowhere later."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = bounded_byte_level()
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_train_batches(docs), trainer=trainer, length=len(docs))
    return tokenizer


def read_tokenizer(path: str) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(Path(path).expanduser()))
    except Exception as err:  # tokenizers raises a bare Exception on a corrupt file
        raise DataError(
            f"tokenizer_file {path!r} is not a readable tokenizer.json ({type(err).__name__}: {str(err)[:120]}); "
            "save it with Tokenizer.save(), or pass tokenizer_file=None to train one",
            step="build_vocab",
        ) from err
    if tokenizer.token_to_id(EOS_TOKEN) is None:
        raise DataError(
            f"tokenizer_file {path!r} has no end-of-text token {EOS_TOKEN!r}: documents could not be "
            f"separated when packed; add it as a special token before saving "
            f"(tokenizer.add_special_tokens([{EOS_TOKEN!r}])), or train one (tokenizer_file=None)",
            step="build_vocab",
        )
    return tokenizer

"""Supplied tokenizers for the LM tests, written offline: a Llama-style folder (``<s>``, ``</s>``) and prompts.

The folder is what a team has on disk: a byte-level BPE with ``<s>`` and ``</s>`` declared as
special tokens and the post-processor ``<s> $A </s>`` (``tokenizers.processors.TemplateProcessing``),
saved with ``PreTrainedTokenizerFast.save_pretrained`` (``tokenizer.json`` + ``tokenizer_config.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, processors

from lightning_order.data.lm.tokenizer import train_byte_bpe


def llama_style_tokenizer(docs: Sequence[str], vocab_size: int = 300) -> Tokenizer:
    """A byte-level BPE with ``</s>`` (id 0) and ``<s>`` (id 1) and the post-processor ``<s> $A </s>``."""
    tokenizer = train_byte_bpe(docs, vocab_size, eos_token="</s>", bos_token="<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> <s> $B </s>",
        special_tokens=[("<s>", tokenizer.token_to_id("<s>")), ("</s>", tokenizer.token_to_id("</s>"))],
    )
    return tokenizer


def llama_style_folder(folder: Path, docs: Sequence[str], vocab_size: int = 300, **settings: Any) -> Path:
    """:func:`llama_style_tokenizer` saved as a Hugging Face tokenizer folder (needs ``transformers``).

    ``settings`` go to ``PreTrainedTokenizerFast`` as they are (e.g. ``chat_template``, ``model_max_length``).
    """
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=llama_style_tokenizer(docs, vocab_size),
        bos_token="<s>",
        eos_token="</s>",
        **settings,
    )
    hf.save_pretrained(str(folder))
    return folder


def prompt_of(document: str, words: int = 6) -> str:
    """The first ``words`` words of a document, cut before a space (where the pre-tokenizer cuts too)."""
    cut = document.split(" ")
    return " ".join(cut[:words]) if len(cut) > words else document


def document_starts(stream: np.ndarray, eos_id: int, count: int) -> list[int]:
    """The positions in a split's token stream where its first ``count`` documents start.

    A document starts at the stream's start or right after an end-of-text id.
    """
    after = (np.flatnonzero(stream == eos_id) + 1).tolist()
    return [0, *after][:count]

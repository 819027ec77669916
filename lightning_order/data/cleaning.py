"""Step 2, ``clean``: row-wise text normalisation.

Order inside the step matters and is fixed here: entities are unescaped first (``&lt;br&gt;``
becomes a tag that is then stripped), unicode is NFKC-normalised (full-width letters, ligatures
and non-breaking spaces become their plain forms), tags are stripped, stray ``##`` word-piece
markers are dropped, runs of the same punctuation collapse to one, whitespace collapses to one
space, and the text is lower-cased (optional). Everything is a compiled regular expression over a
batch: cheap, stateless, and safe under ``num_proc``.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

from lightning_order.errors import DataError

__all__ = ["clean_batch", "clean_text"]

_TAG = re.compile(r"<[^<>]{0,200}>")
_STRAY_MARKER = re.compile(r"#{2,}")
_REPEATED_PUNCT = re.compile(r"([!?.,;:\-_*~=])\1+")
_MIXED_BANG = re.compile(r"[!?]{2,}")
_SPACE = re.compile(r"\s+")


def clean_text(text: str, lowercase: bool = True) -> str:
    """Cleans one text (see the module docstring for what and in which order).

    Args:
        text: the raw text.
        lowercase: lower-case the result.

    Returns:
        The cleaned text (possibly empty).
    """
    text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text)
    text = _TAG.sub(" ", text)
    text = _STRAY_MARKER.sub(" ", text)
    text = _REPEATED_PUNCT.sub(r"\1", text)
    text = _MIXED_BANG.sub(lambda m: m.group(0)[0], text)
    text = _SPACE.sub(" ", text).strip()
    return text.lower() if lowercase else text


def clean_batch(
    batch: dict[str, list[Any]], text_column: str, lowercase: bool = True
) -> dict[str, list[Any]]:
    """Cleans the text column of a batch in place and returns the batch.

    Raises:
        DataError: a text value is not a string (``None``, a number, ...).
    """
    texts = batch[text_column]
    cleaned = []
    for value in texts:
        if not isinstance(value, str):
            raise DataError(
                f"expected text (str) in every row, got {type(value).__name__} ({value!r:.40}); "
                "fix the data or set text_column to the column that holds the text",
                step="clean",
                column=text_column,
            )
        cleaned.append(clean_text(value, lowercase))
    batch[text_column] = cleaned
    return batch

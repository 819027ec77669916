"""The cleaning of one text, defined once: what ``clean`` does to every row.

:func:`clean_text` is the definition (a compiled regular expression per stage, in a fixed order:
entities unescaped first, so ``&lt;br&gt;`` becomes a tag that is then stripped; NFKC; tags
stripped; stray ``##`` markers dropped; runs of the same punctuation collapsed; whitespace
collapsed; lower-cased). :func:`~.arrow.clean_array` computes the same over Arrow arrays and
falls back to this function for the rows its kernels cannot do.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["clean_text"]

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

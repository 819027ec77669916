"""Long documents in bounded pieces, cut where the piecewise result equals the whole text's.

One 30 MB document cleaned, keyed and shingled as one string cost 6-22x its size in copies and
Python word lists (issue #21). Above :data:`LONG_TEXT_CHARS` characters, each of those operations
runs on pieces of about :data:`PIECE_CHARS` characters instead, cut only where cutting changes
nothing (the tests compare both ways on real text):

- :func:`cleaning_pieces` cuts after a line break that sits between two letters or digits:
  Unicode normalisation never composes across a line break, no line-end, control-character,
  end-of-text, trailing-space or blank-line rule of cleaning spans one, and the pieces' own
  ends are handled by the caller (first and last piece).
- :func:`word_pieces` cuts before a whitespace character: lower-casing (final sigma included)
  and splitting into words see the same words on both sides.

A text with no such place for a long stretch stays in one longer piece (correct, only larger).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["LONG_TEXT_CHARS", "PIECE_CHARS", "cleaning_pieces", "word_pieces"]

#: Texts longer than this (in characters) are processed in pieces.
LONG_TEXT_CHARS = 1 << 20
#: Characters per piece, about (a piece ends at the first allowed cut after this many).
PIECE_CHARS = 1 << 18

_LINE_BETWEEN_WORDS = re.compile(r"(?<=[^\W_]\n)(?=[^\W_])")
_BEFORE_WHITESPACE = re.compile(r"(?=\s)")


def _pieces(text: str, cut: re.Pattern[str], size: int | None) -> Iterator[str]:
    size = size or PIECE_CHARS
    start = 0
    while len(text) - start > size:
        found = cut.search(text, start + size)
        if found is None:
            break
        yield text[start : found.start()]
        start = found.start()
    yield text[start:]


def cleaning_pieces(text: str, size: int | None = None) -> Iterator[str]:
    """``text`` in pieces cleaning can process one by one (cut after a line break between two word characters)."""
    return _pieces(text, _LINE_BETWEEN_WORDS, size)


def word_pieces(text: str, size: int | None = None) -> Iterator[str]:
    """``text`` in pieces whose words are the text's words (cut just before a whitespace character)."""
    return _pieces(text, _BEFORE_WHITESPACE, size)

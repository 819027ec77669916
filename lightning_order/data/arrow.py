"""Row-wise text kernels over Arrow arrays: the same results as the per-row Python functions, vectorised.

:func:`clean_array` is :func:`~.cleaning.clean_text` applied to a whole string array,
:func:`text_features` the default engineered features (:func:`~.features.engineer_batch`),
:func:`key_hash_array` the split key hashes (:func:`~.split.key_hashes`, :func:`~.split.is_val`).
Exactness comes first: every kernel returns, for every row, exactly what the Python function
returns (``tests/test_data_fast.py`` holds them to outputs recorded on the per-row path). Where
Arrow's semantics differ from Python's, the rows that could differ are found with cheap Arrow
checks and handed to the Python function, and only those:

* ``html.unescape``: rows whose every ``&`` starts one of the six entities the demo's scraped
  text holds (``&amp; &lt; &gt; &quot; &#39; &nbsp;``) are unescaped by substring replacement;
  any other ``&`` (named entities, numeric ones, a bare ``&``) sends the row to Python.
* NFKC and lower-casing: ASCII rows are their own NFKC form and lower-case with ASCII rules;
  other rows are normalised / lower-cased in Python (``unicodedata`` and ``str.lower``, so the
  Unicode version is Python's, never Arrow's).
* The regular expressions run in RE2 (no backreferences): runs of the same punctuation are
  matched per character; ``\\s`` is spelled out as every code point ``str.isspace`` accepts.
* Word counts (``str.split``) are the spaces plus one in texts whose only whitespace is single
  inner spaces (what ``clean`` leaves); split keys (``\\w+``) are computed in Arrow for ASCII rows.
  Other rows go through Python.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

__all__ = [
    "clean_array",
    "hash_keys",
    "key_bytes",
    "key_hash_array",
    "replace_rows",
    "space_class",
    "text_features",
    "text_keys",
]

#: The entities replaced in Arrow; ``&amp;`` last, so no ``&`` it yields is read again.
_ENTITIES = (
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&quot;", '"'),
    ("&#39;", "'"),
    ("&nbsp;", "\u00a0"),
    ("&amp;", "&"),
)


#: Every code point ``str.isspace`` accepts (Python's ``\\s``), as an RE2 class; ``space_class``
#: recomputes it (``tests/test_data_fast.py`` checks the two agree on this Python).
_SPACE = r"[\x{9}-\x{d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}-\x{2029}\x{202f}\x{205f}\x{3000}]"
_SPACE_BUT_BLANK = _SPACE.replace(r"\x{1c}-\x{20}", r"\x{1c}-\x{1f}")


def space_class(but: str = "") -> str:
    """An RE2 character class of every code point ``str.isspace`` accepts but those in ``but``."""
    points = [c for c in range(0x110000) if chr(c).isspace() and chr(c) not in but]
    ranges, start = [], points[0]
    for prev, cur in zip(points, [*points[1:], None]):
        if cur != prev + 1:
            ranges.append(f"\\x{{{start:x}}}" + (f"-\\x{{{prev:x}}}" if prev != start else ""))
            start = cur
    return "[" + "".join(ranges) + "]"


# Python's ``\s+`` -> " ", matching only what changes: runs of 2+ spaces, and single spaces but " ".
_SPACE_RE = f"{_SPACE}{{2,}}|{_SPACE_BUT_BLANK}"
#: A text whose words ``str.split`` finds between single " " (no other space, none at the ends).
_ODD_SPACE_RE = f"{_SPACE_RE}|^ | $"
_ENTITY_RE = "&(?:" + "|".join(e[1:-1] for e, _ in _ENTITIES) + ");"
_TAG_RE = r"<[^<>]{0,200}>"
_MARKER_RE = r"#{2,}"
# ``([!?.,;:\-_*~=])\1+`` without a backreference: one alternative per character (RE2 rewrites
# name at most 9 groups, hence two patterns); an unmatched group rewrites to nothing.
_RUNS_RE = (
    (r"(!)!+|(\?)\?+|(\.)\.+|(,),+|(;);+|(:):+|(-)-+|(_)_+|(\*)\*+", "".join(f"\\{i}" for i in range(1, 10))),
    (r"(~)~+|(=)=+", r"\1\2"),
)
_MIXED_BANG_RE = r"([!?])[!?]+"


def replace_rows(array: pa.Array, mask: np.ndarray, values: list[Any]) -> pa.Array:
    """``array`` with the rows where ``mask`` is true replaced by ``values`` (in row order)."""
    if not len(values):
        return array
    return pc.replace_with_mask(array, pa.array(mask), pa.array(values, type=array.type))


def _python_rows(array: pa.Array, mask: np.ndarray, fn: Callable[[str], Any]) -> list[Any]:
    return [fn(v) for v in array.filter(pa.array(mask)).to_pylist()]


def _not_ascii(array: pa.Array) -> np.ndarray:
    return ~np.asarray(pc.string_is_ascii(array).fill_null(True), dtype=bool)


def clean_array(array: pa.Array, lowercase: bool = True) -> pa.Array:
    """:func:`~.cleaning.clean_text` of every value of a string array without nulls (same results)."""
    from lightning_order.data.cleaning import clean_text

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    raw = array
    amps = np.asarray(pc.count_substring(array, "&"), dtype=np.int64)
    python = np.zeros(len(array), dtype=bool)
    if amps.any():
        simple = np.asarray(pc.count_substring_regex(array, _ENTITY_RE), dtype=np.int64)
        python = amps != simple  # an entity (or a bare &) only html.unescape knows
        for entity, char in _ENTITIES:
            array = pc.replace_substring(array, entity, char)
    wide = _not_ascii(array) & ~python
    if wide.any():
        array = replace_rows(
            array, wide, _python_rows(array, wide, lambda t: unicodedata.normalize("NFKC", t))
        )
    array = pc.replace_substring_regex(array, _TAG_RE, " ")
    array = pc.replace_substring_regex(array, _MARKER_RE, " ")
    for pattern, rewrite in _RUNS_RE:
        array = pc.replace_substring_regex(array, pattern, rewrite)
    array = pc.replace_substring_regex(array, _MIXED_BANG_RE, r"\1")
    array = pc.replace_substring_regex(array, _SPACE_RE, " ")
    array = pc.utf8_trim(array, characters=" ")
    if lowercase:
        wide = _not_ascii(array) & ~python
        array = pc.ascii_lower(array)
        if wide.any():
            array = replace_rows(array, wide, _python_rows(array, wide, str.lower))
    if python.any():  # these rows are cleaned from their raw text, all in Python
        array = replace_rows(array, python, _python_rows(raw, python, lambda t: clean_text(t, lowercase)))
    return array


def text_features(array: pa.Array) -> dict[str, np.ndarray]:
    """The default engineered features of each text (float64, as :func:`~.features.engineer_batch`).

    Returns:
        ``{"feat_chars", "feat_words", "feat_mean_word_len", "feat_punct"}``.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    chars = np.asarray(pc.utf8_length(array), dtype=np.float64)
    punct = np.asarray(pc.count_substring_regex(array, "[!?.,;:]"), dtype=np.int64)
    words = np.asarray(pc.count_substring(array, " "), dtype=np.float64) + (chars > 0)
    odd = np.asarray(pc.match_substring_regex(array, _ODD_SPACE_RE), dtype=bool)
    if odd.any():
        words[odd] = [len(t.split()) for t in array.filter(pa.array(odd)).to_pylist()]
    mean_len = np.divide(chars, words, out=np.zeros_like(chars), where=words > 0)
    table = np.array([math.log1p(k) for k in range(int(punct.max(initial=0)) + 1)])
    return {
        "feat_chars": chars,
        "feat_words": words,
        "feat_mean_word_len": mean_len,
        "feat_punct": table[punct],
    }


def text_keys(array: pa.Array) -> pa.Array:
    """:func:`~.split.text_key` of every text: its lower-cased ``\\w+`` runs joined by one space."""
    from lightning_order.data.split import text_key

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    keys = pc.utf8_trim(
        pc.replace_substring_regex(pc.ascii_lower(array), r"[^a-z0-9_]+", " "), characters=" "
    )
    wide = _not_ascii(array)
    if wide.any():
        keys = replace_rows(keys, wide, _python_rows(array, wide, text_key))
    return keys


def key_bytes(array: pa.Array, text: bool) -> list[bytes]:
    """The UTF-8 bytes each key is hashed from: :func:`text_keys` of texts, else ``str(value)``.

    A text column with nulls keys them as :func:`~.split.text_key` does (``str(None)``).
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if text and array.null_count == 0:
        return [k.encode("utf-8") for k in text_keys(array).to_pylist()]
    from lightning_order.data.split import text_key

    if text:
        return [text_key(k).encode("utf-8") for k in array.to_pylist()]
    return [str(k).encode("utf-8") for k in array.to_pylist()]


def hash_keys(values: list[bytes], seed: int | None = None) -> np.ndarray:
    """The xxh3-64 hash (uint64) of each key's bytes, with ``seed`` (``None``: unseeded)."""
    if seed is None:
        return np.fromiter(map(xxhash.xxh3_64_intdigest, values), dtype=np.uint64, count=len(values))
    return np.fromiter(
        (xxhash.xxh3_64_intdigest(v, seed=seed) for v in values), dtype=np.uint64, count=len(values)
    )


def key_hash_array(array: pa.Array, text: bool, seed: int | None = None) -> np.ndarray:
    """The xxh3-64 hash of each key (uint64), as :mod:`~.split` computes it.

    Args:
        array: the key column.
        text: the keys are texts (hash :func:`text_keys`), else ``str(value)``.
        seed: the hash's seed (``None``: unseeded, the stored ``key_hash``).
    """
    return hash_keys(key_bytes(array, text), seed)

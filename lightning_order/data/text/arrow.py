"""Row-wise text kernels over Arrow arrays: the same results as the per-row Python functions, vectorised.

:func:`clean_array` is :func:`~.normalise.clean_text` applied to a whole string array,
:func:`text_features` the default engineered features (:func:`~.features.engineer_batch`); the
split key hashes' kernel is :func:`~lightning_order.data.engine.keys.key_hash_array`, beside its
per-row twin :func:`~lightning_order.data.engine.keys.key_hashes`.
Exactness comes first: every kernel returns, for every row, exactly what the Python function
returns (``tests/unit/data/text/test_arrow.py`` holds them to outputs recorded on the per-row path). Where
Arrow's semantics differ from Python's, the rows that could differ are found with cheap Arrow
checks and handed to the Python function, and only those:

* ``html.unescape``: rows whose every ``&`` starts one of the six entities the demo's scraped
  text holds (``&amp; &lt; &gt; &quot; &#39; &nbsp;``) are unescaped by substring replacement;
  any other ``&`` (named entities, numeric ones, a bare ``&``) sends the row to Python.
* NFKC and lower-casing: ASCII rows are their own NFKC form and lower-case with ASCII rules;
  rows whose only other characters are no-break spaces, ``fi``/``fl`` ligatures and full-width
  ASCII forms are normalised byte-wise (nothing can compose there); other rows are normalised /
  lower-cased in Python (``unicodedata`` and ``str.lower``, so the Unicode version is Python's,
  never Arrow's).
* The regular expressions run in RE2 (no backreferences): runs of the same punctuation are
  matched per character; ``\\s`` is spelled out as every code point ``str.isspace`` accepts.
* Word counts (``str.split``) are the spaces plus one in texts whose only whitespace is single
  inner spaces (what ``clean`` leaves); split keys (``\\w+``) are computed in Arrow for ASCII rows.
  Other rows go through Python.
"""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lightning_order.data.engine.keys import not_ascii, python_rows, replace_rows
from lightning_order.data.text.normalise import clean_text

__all__ = ["clean_array", "text_features"]

#: The entities replaced in Arrow; ``&amp;`` last, so no ``&`` it yields is read again.
_ENTITIES = (
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&quot;", '"'),
    ("&#39;", "'"),
    ("&nbsp;", "\u00a0"),
    ("&amp;", "&"),
)


#: Every code point ``str.isspace`` accepts (Python's ``\\s``), as an RE2 class (written out, not
#: recomputed on import; ``tests/unit/data/text/test_arrow.py`` recomputes it on this Python).
_SPACE = r"[\x{9}-\x{d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}-\x{2029}\x{202f}\x{205f}\x{3000}]"
_SPACE_BUT_BLANK = _SPACE.replace(r"\x{1c}-\x{20}", r"\x{1c}-\x{1f}")


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


def clean_array(array: pa.Array, lowercase: bool = True) -> pa.Array:
    """:func:`~.normalise.clean_text` of every value of a string array without nulls (same results)."""
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
    array, other = _simple_nfkc(array)
    wide = other & ~python
    if wide.any():
        array = replace_rows(
            array, wide, python_rows(array, wide, lambda t: unicodedata.normalize("NFKC", t))
        )
    array = pc.replace_substring_regex(array, _TAG_RE, " ")
    array = pc.replace_substring_regex(array, _MARKER_RE, " ")
    for pattern, rewrite in _RUNS_RE:
        array = pc.replace_substring_regex(array, pattern, rewrite)
    array = pc.replace_substring_regex(array, _MIXED_BANG_RE, r"\1")
    array = pc.replace_substring_regex(array, _SPACE_RE, " ")
    array = pc.utf8_trim(array, characters=" ")
    if lowercase:
        wide = not_ascii(array) & ~python
        array = pc.ascii_lower(array)
        if wide.any():
            array = replace_rows(array, wide, python_rows(array, wide, str.lower))
    if python.any():  # these rows are cleaned from their raw text, all in Python
        array = replace_rows(array, python, python_rows(raw, python, lambda t: clean_text(t, lowercase)))
    return array


def _buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (rebased to 0, int64) and the UTF-8 bytes of a string array without nulls."""
    kind = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=kind)[array.offset : array.offset + len(array) + 1]
    raw = array.buffers()[2]
    data = np.frombuffer(raw, dtype=np.uint8) if raw is not None else np.zeros(0, dtype=np.uint8)
    return (offsets - offsets[0]).astype(np.int64), data[offsets[0] : offsets[-1]]


def _simple_nfkc(array: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """NFKC of the rows whose only non-ASCII characters map to ASCII one by one; which rows are left.

    Those characters are U+00A0 (no-break space: " "), U+FB01/U+FB02 (the ``fi``/``fl``
    ligatures) and U+FF01-U+FF5E (full-width forms of ASCII ``!``-``~``). In a row with no other
    non-ASCII character there is no combining mark, so nothing composes and NFKC is exactly this
    character-by-character mapping, applied here to the UTF-8 bytes with numpy.

    Returns:
        The array with those rows normalised, and a mask of the non-ASCII rows it left as they
        were (for ``unicodedata.normalize``).
    """
    offsets, data = _buffers(array)
    leads = np.flatnonzero(data >= 0xC0)  # the first byte of every non-ASCII character
    if not len(leads):
        return array, np.zeros(len(array), dtype=bool)
    b1 = data[leads].astype(np.int64)
    b2 = data[np.minimum(leads + 1, len(data) - 1)].astype(np.int64) & 0x3F
    b3 = data[np.minimum(leads + 2, len(data) - 1)].astype(np.int64) & 0x3F
    two, three = (b1 & 0xE0) == 0xC0, (b1 & 0xF0) == 0xE0
    point = np.where(two, ((b1 & 0x1F) << 6) | b2, np.where(three, ((b1 & 0x0F) << 12) | (b2 << 6) | b3, -1))
    nbsp, liga = point == 0xA0, (point == 0xFB01) | (point == 0xFB02)
    full = (point >= 0xFF01) & (point <= 0xFF5E)
    row = np.searchsorted(offsets, leads, side="right") - 1
    other = np.zeros(len(array), dtype=bool)
    other[row[~(nbsp | liga | full)]] = True
    mapped = ~other[row]  # characters of rows that hold only mappable ones
    out = data.copy()
    at = leads[mapped & nbsp]
    out[at], drop = ord(" "), [at + 1]
    at, second = leads[mapped & liga], point[mapped & liga]
    out[at], out[at + 1] = ord("f"), np.where(second == 0xFB01, ord("i"), ord("l"))
    drop.append(at + 2)
    at = leads[mapped & full]
    out[at] = point[mapped & full] - 0xFEE0
    drop += [at + 1, at + 2]
    dropped = np.sort(np.concatenate(drop))
    kind = np.int64 if pa.types.is_large_string(array.type) else np.int32
    new_offsets = (offsets - np.searchsorted(dropped, offsets)).astype(kind)
    normalised = pa.Array.from_buffers(
        array.type,
        len(array),
        [None, pa.py_buffer(new_offsets.tobytes()), pa.py_buffer(np.delete(out, dropped).tobytes())],
    )
    return normalised, other


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

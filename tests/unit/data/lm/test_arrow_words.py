"""The Arrow paths of dedup and the split give exactly the Python definitions' results.

``dedup.arrow_words`` must be ``words()`` of every text, ``clusters.band_keys`` of an Arrow
column must be its keys of the same texts as strings, and ``keys.text_keys`` must be
``text_key`` of every text: the prepared data (every fingerprint) depends on it. The texts are
real standard-library documentation, every Unicode whitespace character, the case mappings
that are not one character to one (a final sigma, ``İ``, the Kelvin sign) and fuzz of them.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from lightning_order.data.engine.keys import text_key, text_keys
from lightning_order.data.lm import clusters
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.shingles import arrow_words, words

_WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
_TRICKY = ["ΑΣ", "ΑΣ.Α", "ὈΔΥΣΣΕΎΣ", "İstanbul", "\u212aelvin", "Straße", "ﬁne", "Ǆ", "x_y", "A-B", "9z"]


def _fuzz(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces = [*_WHITESPACE, *_TRICKY, "word", "WORD", "a", ".", "!", "'", "_", "  ", "\n\n", "é"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(count)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    real = list(stdlib_corpus())[:1500]
    edge = ["", " ", "\u3000", "a", "A b", " a  b ", "\x1ca\x1fb\x85c\xa0d\u2028e", *_TRICKY]
    found = real + _fuzz(1500, seed=3) + edge
    random.Random(5).shuffle(found)
    return found


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_arrow_words_are_the_words_of_every_text(texts, kind):
    column = pa.array(texts, kind)
    for array in (column, column.slice(11, 900), pa.chunked_array([column.slice(0, 7), column.slice(7)])):
        expected = [words(t) for t in array.to_pylist()]
        flat, counts = arrow_words(array)
        assert counts.tolist() == [len(w) for w in expected]
        assert flat.to_pylist() == [w for found in expected for w in found]


def test_arrow_words_split_at_exactly_the_whitespace_str_split_does():
    texts = [f"a{space}B" for space in _WHITESPACE] + ["a\u200bb", "a\u180eb"]  # not whitespace to Python
    flat, counts = arrow_words(pa.array(texts))
    assert counts.tolist() == [len(t.split()) for t in texts]
    assert flat.to_pylist() == [w for t in texts for w in t.lower().split()]


def test_a_null_text_has_no_words():
    flat, counts = arrow_words(pa.array(["A b", None, "c"]))
    assert counts.tolist() == [2, 0, 1] and flat.to_pylist() == ["a", "b", "c"]


def test_band_keys_of_an_arrow_column_are_those_of_its_strings(texts):
    as_strings = clusters.band_keys(texts, 0.8, 5, 128, 7)
    as_arrow = clusters.band_keys(pa.array(texts, pa.large_string()), 0.8, 5, 128, 7)
    assert as_arrow[2] == as_strings[2] > 0  # some texts are too short for n-grams
    assert np.array_equal(as_arrow[0], as_strings[0]) and np.array_equal(as_arrow[1], as_strings[1])


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_text_keys_are_text_key_of_every_text(texts, kind):
    column = pa.array([*texts, "!a!", "a!", "!a", "__", "A_B-c 9"], kind)
    for array in (
        column,
        column.slice(3, 1000),
        column.slice(0, 0),
        pa.chunked_array([column.slice(0, 2), column.slice(2)]),
    ):
        keys = text_keys(array)
        assert keys.type == kind
        assert keys.to_pylist() == [text_key(t) for t in array.to_pylist()]


def test_text_keys_keep_a_null_null():
    assert text_keys(pa.array(["The, end!", None])).to_pylist() == ["the end", None]


def test_split_key_hashes_are_the_same_in_any_batch_size(texts, monkeypatch):
    from lightning_order.data.engine import keys

    column = pa.array(texts, pa.large_string())
    expected = [
        np.array([xxhash.xxh3_64_intdigest(text_key(t).encode("utf-8"), seed=7) for t in texts], np.uint64),
        np.array([xxhash.xxh3_64_intdigest(text_key(t).encode("utf-8")) for t in texts], np.uint64),
    ]
    for size in (keys.KEY_BATCH_BYTES, 300, 1):  # one batch, many, one text each
        monkeypatch.setattr(keys, "KEY_BATCH_BYTES", size)
        found = keys.text_key_hashes(column, (7, None))
        assert all(np.array_equal(a, b) for a, b in zip(found, expected))

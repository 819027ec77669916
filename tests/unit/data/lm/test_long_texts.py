"""A long document is cleaned, keyed and shingled in pieces to exactly what the whole text gives.

The piecewise paths (lightning_order.data.engine.long_texts) are forced on a few hundred kB of real
text by lowering the length threshold and the piece size; the reference is the same function
with the threshold out of reach. Adversarial bits (CRLF, control characters inside end-of-text
markers, trailing spaces, blank-line runs, final sigma, combining marks) sit at many cuts.
"""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.data.engine import long_texts
from lightning_order.data.lm import clusters, documents, shingles
from lightning_order.data.lm.corpus import stdlib_corpus

TRICKS = [
    "x\r\ny",
    "ab\n\n\n\n\ncd",
    "trailing   \t\nnext",
    "<|endo\x00ftext|> and <|endoftext|>",
    "ΟΔΟΣ ΣΟΦΟΣ σ",
    "cafe\u0301 \u0301x",
    "\x1c\x1d\x1e\n\x0bword",
    "\ufb01ne ligature",  # NFKC: fi
]


@pytest.fixture(scope="module")
def long_text() -> str:
    docs = stdlib_corpus(400)
    mixed = []
    for i, doc in enumerate(docs):
        mixed.append(doc)
        mixed.append(TRICKS[i % len(TRICKS)])
    return "\n  \n".join(mixed)


@pytest.fixture()
def pieces_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text above 2 000 characters goes the piecewise way, in pieces of about 500."""
    for module in (documents, shingles, clusters):
        monkeypatch.setattr(module, "LONG_TEXT_CHARS", 2000)
    monkeypatch.setattr(documents, "PIECE_CHARS", 500)
    monkeypatch.setattr(long_texts, "PIECE_CHARS", 500)


def _whole(fn, *args):
    """``fn(*args)`` with the piecewise path out of reach (the reference)."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (documents, shingles, clusters):
            patch.setattr(module, "LONG_TEXT_CHARS", 10**12)
        return fn(*args)


def test_the_text_is_cut_many_times(long_text: str, pieces_forced: None) -> None:
    assert len(long_text) > 100_000
    cleaning = list(long_texts.cleaning_pieces(long_text))
    words = list(long_texts.word_pieces(long_text))
    assert len(cleaning) > 100 and len(words) > 100
    assert "".join(cleaning) == long_text == "".join(words)


def test_cleaning_in_pieces_gives_the_whole_texts_cleaning(long_text: str, pieces_forced: None) -> None:
    whole = _whole(documents.clean_document, long_text)
    assert documents.clean_document(long_text) == whole
    assert "<|endoftext|>" not in whole and "\r" not in whole and "\n\n\n" not in whole


def test_keys_and_shingles_in_pieces_are_the_whole_texts(long_text: str, pieces_forced: None) -> None:
    texts = [long_text, long_text.replace(" ", " \t "), "short text here"]
    assert all(
        np.array_equal(a, b)
        for a, b in zip(documents.document_keys(texts), _whole(documents.document_keys, texts))
    )
    assert np.array_equal(shingles.shingle_set(long_text), _whole(shingles.shingle_set, long_text))
    keys, rows, short = clusters.band_keys(texts, 0.8, 5, 64, 3)
    whole_keys, whole_rows, whole_short = _whole(clusters.band_keys, texts, 0.8, 5, 64, 3)
    assert np.array_equal(keys, whole_keys) and np.array_equal(rows, whole_rows) and short == whole_short == 1
    # The same words spaced otherwise are exact duplicates: one key.
    hi, lo, own = documents.document_keys(texts[:2])
    assert hi[0] == hi[1] and lo[0] == lo[1] and own[0] != own[1]


def test_a_long_run_without_a_cut_stays_one_piece(pieces_forced: None) -> None:
    text = "a" * 5000 + " b"
    assert list(long_texts.word_pieces(text)) == ["a" * 5000, " b"]
    assert list(long_texts.cleaning_pieces(text)) == [text]


def test_split_keys_of_a_long_text_are_the_whole_texts(
    long_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa

    from lightning_order.data.engine import keys

    texts = pa.array([long_text, "Short one!", long_text.replace(" ", "  ;")], pa.large_string())
    whole = [keys.hash_keys(keys.key_bytes(texts, text=True), seed) for seed in (7, None)]
    monkeypatch.setattr(keys, "LONG_TEXT_CHARS", 2000)
    monkeypatch.setattr(long_texts, "PIECE_CHARS", 500)
    pieces = keys.text_key_hashes(texts, (7, None))
    assert all(np.array_equal(a, b) for a, b in zip(pieces, whole))
    assert pieces[1][0] == pieces[1][2]  # punctuation and spacing ignored: one key

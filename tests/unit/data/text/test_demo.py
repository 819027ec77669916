"""``lightning_order.data.text.demo``: the built-in demo corpus."""

from __future__ import annotations

import numpy as np

from lightning_order.data.text.demo import DEMO_NUMERIC_COLUMNS, demo_rows, make_demo_corpus
from lightning_order.data.text.normalise import clean_text


def test_demo_is_deterministic_and_dirty():
    first = list(demo_rows(400, seed=3))
    assert first == list(demo_rows(400, seed=3))
    assert first != list(demo_rows(400, seed=4))
    text = " ".join(r["text"] for r in first)
    for dirt in ("<", "&", "##", "!!", "\u00a0"):
        assert dirt in text, dirt
    assert any(ord(c) > 0xFF00 for c in text)  # full-width letters
    cleaned = [clean_text(r["text"]) for r in first]
    assert len(set(cleaned)) < len(cleaned)  # near-duplicates become identical after cleaning
    assert len({r["text"] for r in first}) > len(set(cleaned))
    assert {r["label"] for r in first} == {0, 1, 2, 3}


def test_demo_numeric_scales_and_sources():
    rows = list(demo_rows(600, sources=3))
    scales = {c: np.median(np.abs([r[c] for r in rows if r["source"] == 0])) for c in DEMO_NUMERIC_COLUMNS}
    assert scales["ratio"] < 0.01 < 1 < scales["score"] < 1000 < scales["amount"]
    assert [r["source"] for r in rows] == sorted(r["source"] for r in rows)  # contiguous blocks
    score = {s: np.mean([r["score"] for r in rows if r["source"] == s]) for s in range(3)}
    assert score[1] > 5 * score[0] and score[2] > 5 * score[1]


def test_make_demo_corpus(tmp_path):
    ds = make_demo_corpus(300, seed=1, cache_dir=tmp_path)
    assert len(ds) == 300
    assert set(ds.column_names) == {"text", "label", "source", *DEMO_NUMERIC_COLUMNS}
    assert ds[0]["text"] == next(demo_rows(1, seed=1))["text"]

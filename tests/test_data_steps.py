"""The pure step functions of lightning_order.data: cleaning, features, split, vocab, shard, demo, cache."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from lightning_order.data import cache
from lightning_order.data.cleaning import clean_batch, clean_text
from lightning_order.data.demo import DEMO_NUMERIC_COLUMNS, demo_rows, make_demo_corpus
from lightning_order.data.features import (
    ENGINEERED_FEATURES,
    engineer_batch,
    fit_statistics,
    streaming_moments,
)
from lightning_order.data.shard import shard_bounds
from lightning_order.data.split import is_val, key_hashes
from lightning_order.data.vocab import SPECIAL_TOKENS, check_vocab_size, train_tokenizer
from lightning_order.errors import DataError


# -- cleaning ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<b>Hello</b> world", "hello world"),
        ("rock &amp; roll", "rock & roll"),
        ("a&nbsp;b", "a b"),
        ("&lt;br&gt;line", "line"),
        ("ｆｕｌｌ width", "full width"),
        ("ﬁne ﬂow", "fine flow"),
        ("##ing and ##ed", "ing and ed"),
        ("wow!!! really??", "wow! really?"),
        ("so.... what,,", "so. what,"),
        ("mixed!?!? end", "mixed! end"),
        ("  many \t\n spaces\u00a0here ", "many spaces here"),
        ("<div class='x'></div>", ""),
    ],
)
def test_clean_text(raw, expected):
    assert clean_text(raw) == expected


def test_clean_text_keeps_case_when_asked():
    assert clean_text("<i>Hello</i>  World!!", lowercase=False) == "Hello World!"


@pytest.mark.parametrize("bad", [None, 3, 2.5, b"bytes"])
def test_clean_batch_rejects_non_string_text(bad):
    with pytest.raises(DataError) as info:
        clean_batch({"text": ["fine", bad]}, "text")
    assert info.value.step == "clean" and info.value.column == "text"


# -- demo corpus --------------------------------------------------------------------------------
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


# -- features -----------------------------------------------------------------------------------
def test_engineer_batch_is_rowwise():
    batch = {"text": ["a bb ccc!", "x"], "n": [1.0, 2.0]}
    out = engineer_batch(dict(batch), "text", ["n"])
    assert out["feat_chars"] == [9.0, 1.0]
    assert out["feat_words"] == [3.0, 1.0]
    assert out["feat_punct"][0] == pytest.approx(math.log(2))
    single = engineer_batch({"text": ["x"], "n": [2.0]}, "text", ["n"])
    assert all(single[f] == [out[f][1]] for f in ENGINEERED_FEATURES)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_engineer_batch_rejects_non_finite(bad):
    with pytest.raises(DataError) as info:
        engineer_batch({"text": ["a", "b"], "n": [1.0, bad]}, "text", ["n"])
    assert info.value.column == "n" and info.value.step == "engineer_features"


def test_streaming_moments_match_two_pass():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.normal(1e4, 3e3, (500, 1)), rng.normal(1e-3, 1e-4, (500, 1))], axis=1)
    blocks = [data[i : i + 37] for i in range(0, len(data), 37)]
    count, mean, std = streaming_moments(blocks)
    assert count == 500
    np.testing.assert_allclose(mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, data.std(axis=0), rtol=1e-10)


def test_fit_statistics_rejects_constant_column():
    import datasets

    ds = datasets.Dataset.from_dict({"a": [1.0, 2.0, 3.0], "c": [5.0, 5.0, 5.0]})
    with pytest.raises(DataError, match="zero variance") as info:
        fit_statistics(ds, ["a", "c"], batch_size=2)
    assert info.value.column == "c" and info.value.step == "fit_features"


# -- split --------------------------------------------------------------------------------------
def test_split_is_a_function_of_the_key():
    keys = [f"text {i % 50}" for i in range(1000)]
    flags = is_val(keys, 0.2, seed=0)
    by_key = {}
    for key, flag in zip(keys, flags):
        assert by_key.setdefault(key, flag) == flag
    more = is_val([*keys, "new row"], 0.2, seed=0)
    assert (more[:-1] == flags).all()  # adding rows never moves existing ones
    assert (is_val(keys, 0.2, seed=1) != flags).any()


def test_split_fraction_and_key_hash():
    keys = [str(i) for i in range(20000)]
    assert abs(is_val(keys, 0.1, 0).mean() - 0.1) < 0.01
    hashes = key_hashes(keys[:3])
    assert hashes.dtype == np.int64 and len(set(hashes.tolist())) == 3
    assert (key_hashes(["a"]) == key_hashes(["a"])).all()


# -- vocab --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, 3, len(SPECIAL_TOKENS), "100"])
def test_vocab_size_must_exceed_special_tokens(bad):
    with pytest.raises(DataError) as info:
        check_vocab_size(bad)
    assert info.value.step == "build_vocab"


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_train_tokenizer(kind):
    texts = [clean_text(r["text"]) for r in demo_rows(300)]
    batches = (texts[i : i + 64] for i in range(0, len(texts), 64))
    tok = train_tokenizer(batches, 200, kind)
    assert tok.token_to_id("[PAD]") == 0
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert 50 < tok.get_vocab_size() <= 200
    assert tok.encode("[CLS] the goal").tokens[0] == "[CLS]"


# -- shard --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("length", "world"), [(10, 1), (10, 2), (10, 3), (7, 7), (1001, 4)])
def test_shard_bounds_equal_disjoint(length, world):
    bounds = [shard_bounds(length, world, r) for r in range(world)]
    sizes = {stop - start for start, stop, _ in bounds}
    assert len(sizes) == 1
    covered = list(itertools.chain.from_iterable(range(a, b) for a, b, _ in bounds))
    assert covered == list(range(len(covered)))
    assert bounds[0][2] == length - len(covered) == length % world


@pytest.mark.parametrize(("length", "world", "rank"), [(1, 2, 0), (10, 2, 2), (10, 0, 0)])
def test_shard_bounds_errors(length, world, rank):
    with pytest.raises(ValueError):
        shard_bounds(length, world, rank)


# -- cache --------------------------------------------------------------------------------------
def test_cache_stale_leftovers_are_removed(tmp_path):
    key = "k" * 32
    tmp = cache.new_temp_dir(tmp_path, key)
    (tmp / "train").mkdir()
    half = tmp_path / key
    half.mkdir()
    (half / "manifest.json").write_text("{not json")
    assert not cache.is_complete(half, key)
    removed = cache.remove_stale(tmp_path, key)
    assert set(removed) == {tmp, half}
    assert not tmp.exists() and not half.exists()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert cache.default_cache_dir() == tmp_path
    monkeypatch.delenv(cache.CACHE_ENV)
    assert cache.default_cache_dir().name == "lightning_order"


def test_text_keys_ignore_punctuation_so_near_duplicates_share_a_split():
    from lightning_order.data.split import text_key

    a, b = "the match & the goal!", 'the match the "goal"'
    assert text_key(a) == text_key(b) == "the match the goal"
    flags = is_val([a, b] * 200, 0.5, seed=3, text=True)
    assert len(set(flags[0::2].tolist())) == 1 and (flags[0::2] == flags[1::2]).all()
    assert (key_hashes([a], text=True) == key_hashes([b], text=True)).all()
    assert (key_hashes([a]) != key_hashes([b])).all()  # a group key is taken as it is

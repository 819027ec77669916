"""The window-overlap check on packed token streams: twin documents, not shared phrases."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.windows import (
    NGRAM,
    check_window_overlap,
    find_ngrams,
    ngram_hashes,
    window_overlap,
)

EOS = 0
WINDOW = 33


def _docs(rng: np.random.Generator, count: int, low: int = 60, high: int = 200) -> list[np.ndarray]:
    return [rng.integers(1, 5000, size=int(rng.integers(low, high))) for _ in range(count)]


def _stream(docs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.r_[d, EOS] for d in docs])


def _chunks(tokens: np.ndarray, size: int = 1000) -> list[np.ndarray]:
    return [tokens[i : i + size] for i in range(0, tokens.size, size)]


def test_ngram_hashes_match_equal_ngrams_only():
    tokens = np.array([5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 9])
    h = ngram_hashes(tokens, 4)
    assert h.size == tokens.size - 3
    assert h[0] == h[4] and h[0] != h[8] and len(set(h.tolist())) == 5
    with pytest.raises(ValueError, match="power of two"):
        ngram_hashes(tokens, 3)


def test_find_ngrams_loses_nothing_at_chunk_boundaries():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 100, size=5000)
    val = train[1234:1300].copy()
    whole = find_ngrams(ngram_hashes(val), [train])
    pieces = find_ngrams(ngram_hashes(val), _chunks(train, 37))
    assert whole.all() and pieces.all()


def test_planted_twin_documents_are_counted_exactly():
    rng = np.random.default_rng(1)
    train_docs, val_docs = _docs(rng, 400), _docs(rng, 100)
    planted = [3, 17, 40, 41, 77]
    for i, j in zip(planted, [5, 9, 100, 200, 300]):
        val_docs[i] = train_docs[j]
    val = _stream(val_docs)
    result = window_overlap(val, _chunks(_stream(train_docs)), WINDOW, separators=[EOS])
    # Every window inside a planted document (and its end-of-text) is a twin; nothing else is.
    inside = sum(len(val_docs[i]) + 1 - WINDOW + 1 for i in planted if i not in (40, 41))
    inside += len(val_docs[40]) + len(val_docs[41]) + 2 - WINDOW + 1  # two planted in a row: one span
    assert result.twins == inside
    assert window_overlap(val, [_stream(train_docs)], WINDOW).twins == inside  # the id read off the data
    assert result.train_tokens == _stream(train_docs).size and result.windows == val.size - WINDOW + 1


def test_a_phrase_shared_by_distinct_documents_is_no_twin_whatever_its_length():
    rng = np.random.default_rng(2)
    footer = rng.integers(1, 5000, size=3 * WINDOW)  # longer than two windows: identical windows
    train_docs, val_docs = _docs(rng, 200), _docs(rng, 50)
    train_docs = [np.r_[d, footer] if i % 3 == 0 else d for i, d in enumerate(train_docs)]
    val_docs = [np.r_[d, footer] if i % 3 == 0 else d for i, d in enumerate(val_docs)]
    val = _stream(val_docs)
    result = window_overlap(val, [_stream(train_docs)], WINDOW, separators=[EOS])
    assert result.twins == 0 and check_window_overlap(result) == []
    # No tokenizer to name the end-of-text id: read off the data (it closes every footer's match).
    assert window_overlap(val, [_stream(train_docs)], WINDOW).twins == 0
    # The old identical-window rate would have called it a leak.
    train_windows = {bytes(w) for w in np.lib.stride_tricks.sliding_window_view(_stream(train_docs), WINDOW)}
    identical = np.mean(
        [bytes(w) in train_windows for w in np.lib.stride_tricks.sliding_window_view(val, WINDOW)]
    )
    assert identical > 0.1


def test_without_a_separator_runs_of_two_windows_stand_for_documents():
    rng = np.random.default_rng(3)
    train = rng.integers(1, 5000, size=20_000)
    val = np.r_[
        rng.integers(1, 5000, size=500), train[100 : 100 + 3 * WINDOW], rng.integers(1, 5000, size=500)
    ]
    phrase = np.r_[
        rng.integers(1, 5000, size=500), train[900 : 900 + WINDOW + 10], rng.integers(1, 5000, size=500)
    ]
    assert window_overlap(val, [train], WINDOW).twins == 3 * WINDOW - WINDOW + 1
    assert window_overlap(phrase, [train], WINDOW).twins == 0


def test_check_raises_above_the_threshold_with_counts_and_fix():
    rng = np.random.default_rng(4)
    train_docs, val_docs = _docs(rng, 300), _docs(rng, 100)
    for i in range(0, 100, 20):  # 5 % of the documents
        val_docs[i] = train_docs[i]
    result = window_overlap(_stream(val_docs), [_stream(train_docs)], WINDOW, separators=[EOS])
    (violation,) = check_window_overlap(result, threshold=0.01)
    assert violation.rule == "train-val-overlap" and violation.steps == ("split",)
    assert f"{result.twins} of {result.windows} validation windows" in violation.message
    assert "deduplicate documents before the split" in violation.fix
    assert violation.details["estimate"]["exact"] is True
    assert check_window_overlap(result, threshold=0.5) == []


def test_ngram_length_is_a_power_of_two():
    assert NGRAM & (NGRAM - 1) == 0


# -- a validation slice that overlaps train at the cut (#43 item 4) -----------------------------------
@pytest.fixture(scope="module")
def nanogpt_documents() -> tuple[list[np.ndarray], int]:
    """tests/nanogpt.py's corpus, each document encoded and ended by its end-of-text id."""
    import nanogpt

    docs = list(nanogpt.corpus())
    tokenizer = nanogpt.train_tokenizer(docs)
    eos = tokenizer.token_to_id(nanogpt.EOS)
    return [np.asarray([*e.ids, eos]) for e in tokenizer.encode_batch(docs)], eos


@pytest.mark.parametrize("order", range(8))
def test_a_slice_overlapping_train_by_four_blocks_is_found_in_every_document_order(nanogpt_documents, order):
    encoded, eos = nanogpt_documents
    stream = np.concatenate([encoded[i] for i in np.random.default_rng(order).permutation(len(encoded))])
    cut, shared = int(0.9 * stream.size), 4 * WINDOW  # nanoGPT's data[:n], and a val slice starting 4 blocks early
    train, val = stream[:cut], stream[cut - shared :]
    result = window_overlap(val, _chunks(train), WINDOW, separators=[eos])
    assert [v.rule for v in check_window_overlap(result)] == ["train-val-overlap"]  # was 6 orders of 8
    assert result.edge == shared and result.twins >= shared - WINDOW + 1
    assert "shares with train at the cut" in check_window_overlap(result)[0].message
    # The same slice taken before train (val = data[:k], train = data[k - shared:]) is found at its end.
    before = window_overlap(stream[: stream.size - cut + shared], [stream[stream.size - cut :]], WINDOW, [eos])
    assert before.edge == shared and check_window_overlap(before)
    # A cut without overlap (nanoGPT's own split) stays silent in every order.
    correct = window_overlap(stream[cut:], _chunks(train), WINDOW, separators=[eos])
    assert correct.edge == 0 and correct.twins == 0 and check_window_overlap(correct) == []


def test_a_shared_header_at_the_start_of_validation_is_no_slice():
    rng = np.random.default_rng(5)
    header = rng.integers(1, 5000, size=3 * WINDOW)  # boilerplate longer than two windows
    train_docs = [np.r_[header, d] for d in _docs(rng, 100)]
    val_docs = [np.r_[header, d] for d in _docs(rng, 30)]
    result = window_overlap(_stream(val_docs), [_stream(train_docs)], WINDOW, separators=[EOS])
    assert result.twins == 0 and getattr(result, "edge", 0) == 0

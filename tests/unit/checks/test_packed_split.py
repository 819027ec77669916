"""A split made after packing, from the windows' places in one stream (#37 item 4)."""

from __future__ import annotations

import numpy as np

from lightning_order.checks.packed_split import check_packed_split, cut_windows

EOS, WINDOW = 0, 33


def _stream(seed: int = 0, docs: int = 300) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [np.r_[rng.integers(1, 500, size=int(rng.integers(60, 300))), EOS] for _ in range(docs)]
    )


def test_a_random_split_of_packed_blocks_is_caught_with_the_fix():
    stream = _stream()
    starts = np.arange(0, stream.size - WINDOW + 1, WINDOW)
    order = np.random.default_rng(1).permutation(starts.size)
    val, train = starts[order[: starts.size // 10]], starts[order[starts.size // 10 :]]
    cut = cut_windows(stream, train, val, WINDOW, WINDOW, separators=[EOS])
    assert cut.mean() > 0.5  # most blocks continue a document whose next block is in train
    (v,) = check_packed_split(cut, whole=True, stride=WINDOW, window=WINDOW)
    assert v.rule == "train-val-overlap" and "packed blocks" in v.message and "after packing" in v.message
    assert "split the documents first" in v.fix and "never random_split" in v.fix


def test_a_random_split_of_every_window_is_cut_everywhere():
    stream = _stream(2)
    starts = np.arange(stream.size - WINDOW + 1)
    order = np.random.default_rng(3).permutation(starts.size)
    val, train = starts[order[:500]], starts[order[500:]]
    assert cut_windows(stream, train, val, WINDOW, 1, separators=[EOS]).all()
    (v,) = check_packed_split(
        cut_windows(stream, train, val, WINDOW, 1), whole=False, stride=1, window=WINDOW
    )
    assert "overlapping windows" in v.message and not v.details["estimate"]["exact"]


def test_a_contiguous_split_of_the_stream_and_blocks_meeting_at_a_separator_are_silent():
    stream = _stream(4)
    starts = np.arange(stream.size - WINDOW + 1)
    cut_at = int(starts.size * 0.9)
    cut = cut_windows(stream, starts[:cut_at], starts[cut_at:], WINDOW, 1, separators=[EOS])
    assert cut.sum() <= WINDOW and check_packed_split(cut, whole=True, stride=1, window=WINDOW) == []
    # Two documents, one block each, meeting at the end-of-text: no document on both sides.
    docs = np.r_[np.arange(1, WINDOW), EOS, np.arange(1, WINDOW), EOS]
    assert not cut_windows(docs, np.array([0]), np.array([WINDOW]), WINDOW, WINDOW, separators=[EOS]).any()
    assert cut_windows(docs, np.array([0]), np.array([WINDOW]), WINDOW, WINDOW).all()  # no separator known

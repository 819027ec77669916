"""Blocks of one stream split at random into train.bin / val.bin: random bigrams at every seam."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.block_seams import Z_THRESHOLD, check_block_seams, check_stream_seams, seam_z

PERIOD = 33


def _text(n_docs: int = 400, seed: int = 0) -> np.ndarray:
    """Documents from a Markov chain (a few likely successors per token), each ended by 0."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(1, 300, size=(300, 3))
    docs = []
    for _ in range(n_docs):
        t, doc = int(rng.integers(1, 300)), []
        for _ in range(int(rng.integers(30, 120))):
            doc.append(t)
            t = int(successors[t, rng.integers(0, 3)])
        docs.append([*doc, 0])
    return np.asarray([t for d in docs for t in d], dtype=np.int64)


def _planted(seed: int) -> tuple[np.ndarray, np.ndarray]:
    ids = _text(seed=seed)
    blocks = ids[: ids.size // PERIOD * PERIOD].reshape(-1, PERIOD)
    order = np.random.default_rng(seed).permutation(len(blocks))
    cut = round(0.8 * len(blocks))
    return blocks[order[:cut]].ravel(), blocks[order[cut:]].ravel()


@pytest.mark.parametrize("seed", range(3))
def test_blocks_split_at_random_raise_train_val_overlap(seed):
    train, val = _planted(seed)
    [violation] = check_stream_seams(train, val.size, PERIOD)
    assert violation.rule == "train-val-overlap" and violation.details["period"] == PERIOD
    assert f"blocks of {PERIOD} tokens" in violation.message and "train.bin" in violation.fix


@pytest.mark.parametrize("seed", range(3))
def test_whole_documents_are_silent_even_cut_to_whole_periods(seed):
    ids = _text(seed=seed)
    train = ids[: ids.size * 4 // 5 // PERIOD * PERIOD]  # lengths multiples of the period: only z decides
    assert seam_z(train, PERIOD) > Z_THRESHOLD
    assert check_stream_seams(train, 10 * PERIOD, PERIOD) == []


def test_lengths_not_whole_periods_are_silent_whatever_z():
    assert check_block_seams(PERIOD * 10 + 1, PERIOD * 3, PERIOD, -20.0) == []
    assert check_block_seams(PERIOD * 10, PERIOD * 3, PERIOD, -3.0) == []
    assert len(check_block_seams(PERIOD * 10, PERIOD * 3, PERIOD, -20.0)) == 1


def test_a_short_stream_gives_no_statistic():
    assert np.isnan(seam_z(np.arange(20), PERIOD))

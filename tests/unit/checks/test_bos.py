"""checks/bos.py (and the starts of checks/token_rows.py): one ``bos-mismatch`` rule, its evidence in details."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.bos import StartCounts, check_bos, count_starts
from lightning_order.checks.token_rows import document_starts

BOS, EOS, PAD = 1, 2, 2


def _padded(first: list[int], rows: int = 10) -> tuple[np.ndarray, np.ndarray]:
    row = [*first, 7, 8, EOS]
    ids = np.full((rows, len(row) + 2), PAD)
    ids[:, : len(row)] = row
    mask = (ids != PAD).astype(int)
    mask[:, len(row) - 1] = 1  # the real </s>
    return ids, mask


def _counts(first: list[int]) -> StartCounts:
    return count_starts(document_starts(*_padded(first), EOS, BOS), BOS)


def test_starts_of_padded_rows_and_packed_blocks():
    assert _counts([BOS, BOS]) == StartCounts(10, 10, 10)
    packed = np.array([[5, 6, EOS, BOS, 7, EOS, 8, 9]] * 3)
    assert count_starts(document_starts(packed, None, EOS, BOS), BOS) == StartCounts(6, 3, 0)


def test_bos_twice_is_caught():
    (v,) = check_bos(_counts([BOS, BOS]), _counts([BOS, BOS]), True, BOS)
    assert v.rule == "bos-mismatch" and "10 of 10 train document starts open with BOS twice" in v.message
    assert v.details["train"] == {"starts": 10, "with_bos": 10, "with_two": 10}


def test_bos_on_train_only_is_caught_with_both_shares():
    (v,) = check_bos(_counts([BOS]), _counts([]), True, BOS)
    assert "BOS opens 10 of 10 train and 0 of 10 validation document starts" in v.message
    assert "the same way for every split" in v.fix


def test_train_rows_without_the_bos_the_tokenizer_adds_are_caught():
    (v,) = check_bos(_counts([]), None, True, BOS)
    assert "tokenizer adds BOS at inference" in v.message and v.details["adds_bos"] is True


@pytest.mark.parametrize(
    "train, val, adds",
    [
        ([BOS], [BOS], True),  # Llama-style, correct
        ([], [], False),  # no BOS anywhere
        ([BOS], [BOS], False),  # a BOS-first packing by hand: the generation code may add it
        ([], [], None),  # unknown tokenizer
    ],
)
def test_consistent_starts_are_silent(train, val, adds):
    assert check_bos(_counts(train), _counts(val), adds, BOS) == []


def test_too_few_starts_decide_nothing():
    few = StartCounts(3, 3, 3)
    assert check_bos(few, StartCounts(3, 0, 0), True, BOS) == []

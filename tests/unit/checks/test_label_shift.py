"""checks/label_shift.py: pre-shifted labels counted per row, and ``labels-shifted-twice`` only for a model that shifts."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.label_shift import (
    check_label_shift,
    check_unshifted_labels,
    preshifted_rows,
    unshifted_rows,
)
from lightning_order.rules import RULES

BLOCKS = np.arange(4 * 9).reshape(4, 9) % 50  # four blocks of block_size + 1 = 9 tokens


def test_shifted_labels_are_counted_and_unshifted_ones_are_not() -> None:
    assert preshifted_rows(BLOCKS[:, :-1], BLOCKS[:, 1:]) == 4
    assert preshifted_rows(BLOCKS[:, :-1], BLOCKS[:, :-1]) == 0  # the transformers convention


def test_masked_positions_are_left_out_and_repeated_tokens_show_neither_convention() -> None:
    labels = BLOCKS[:, 1:].copy()
    labels[:, -3:] = -100  # padding left out of the loss
    assert preshifted_rows(BLOCKS[:, :-1], labels) == 4
    assert preshifted_rows(np.full((2, 8), 7), np.full((2, 8), 7)) == 0
    assert preshifted_rows(BLOCKS[:, :-1], np.full((4, 8), -100)) == 0  # no label kept


def test_a_self_shifting_model_fed_shifted_labels_is_a_violation() -> None:
    [violation] = check_label_shift(True, 4, 4, "GPT2LMHeadModel")
    assert violation.rule == "labels-shifted-twice" and violation.steps[0] == "train"
    assert "GPT2LMHeadModel" in violation.message and "4 of 4 sampled train rows" in violation.message
    assert 'batch_format="hf"' in violation.message and violation.fix == RULES["labels-shifted-twice"].fix


@pytest.mark.parametrize(
    ("shifts_itself", "preshifted", "rows"),
    [(False, 4, 4), (True, 0, 4), (True, 3, 4), (True, 0, 0)],
    ids=["model-does-not-shift", "unshifted", "some-rows-only", "no-rows"],
)
def test_no_violation_without_both_a_shifting_model_and_shifted_labels(
    shifts_itself, preshifted, rows
) -> None:
    assert check_label_shift(shifts_itself, preshifted, rows) == []


def test_labels_equal_to_the_inputs_are_counted_and_shifted_ones_are_not() -> None:
    assert unshifted_rows(BLOCKS[:, :-1], BLOCKS[:, :-1]) == 4
    assert unshifted_rows(BLOCKS[:, :-1], BLOCKS[:, 1:]) == 0
    assert unshifted_rows(np.full((2, 8), 7), np.full((2, 8), 7)) == 0  # a repeated token shows neither


def test_a_model_that_does_not_shift_fed_unshifted_labels_is_a_violation() -> None:
    [violation] = check_unshifted_labels(4, 4, "OrderedCausalLM")
    assert violation.rule == "labels-not-shifted" and violation.fix == RULES["labels-not-shifted"].fix
    assert "OrderedCausalLM" in violation.message and "4 of 4 sampled train rows" in violation.message
    assert check_unshifted_labels(3, 4) == [] and check_unshifted_labels(0, 0) == []

"""checks/eos_labels.py: ``eos-label-masked`` and ``documents-without-eos`` from plain arrays."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.eos_labels import (
    check_eos_labels,
    check_rows_end,
    masked_eos_rows,
    unterminated_rows,
)

EOS = 0


def _packed(rows: int = 16, width: int = 12) -> np.ndarray:
    ids = np.arange(1, rows * width + 1).reshape(rows, width) % 50 + 1
    ids[:, 5] = EOS  # one document end per block
    return ids


def test_every_end_of_text_label_masked_with_pad_equal_to_eos_is_caught_with_the_fix():
    ids = _packed()
    labels = np.where(ids == EOS, -100, ids)  # DataCollatorForLanguageModeling with pad = eos
    rows, masked = masked_eos_rows(ids, labels, None, EOS)
    assert (rows, masked) == (16, 16)
    (v,) = check_eos_labels(rows, masked, pad_id=EOS, eos_id=EOS)
    assert v.rule == "eos-label-masked" and "16 of 16" in v.message
    assert "distinct pad token" in v.message and "attention_mask" in v.fix


def test_shifted_labels_that_mask_the_end_of_text_are_read_too():
    ids = _packed()
    labels = np.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    labels[:, 4] = -100  # the label predicting the end-of-text at position 5
    assert masked_eos_rows(ids, labels, None, EOS) == (16, 16)


@pytest.mark.parametrize(
    "pad_id, masked_rows, why",
    [(1, 16, "pad is not eos"), (EOS, 4, "a few rows only"), (None, 16, "no pad token")],
)
def test_no_false_alarm(pad_id, masked_rows, why):
    assert check_eos_labels(16, masked_rows, pad_id, EOS) == [], why


def test_labels_kept_at_attended_ends_with_pads_masked_are_silent():
    ids = np.full((10, 8), EOS)
    ids[:, :4] = [[5, 6, 7, EOS]] * 10  # </s> at 3, then pads (= eos) masked by attention
    mask = (np.arange(8) < 4).astype(int)[None].repeat(10, 0)
    labels = np.where(mask == 1, ids, -100)
    rows, masked = masked_eos_rows(ids, labels, mask, EOS)
    assert (rows, masked) == (10, 0) and check_eos_labels(rows, masked, EOS, EOS) == []


def test_padded_rows_that_never_end_with_eos_are_caught():
    ids = np.full((10, 8), EOS)
    ids[:, :4] = [1, 5, 6, 7]  # "<s> $A", padded with eos
    mask = (np.arange(8) < 4).astype(int)[None].repeat(10, 0)
    rows, unterminated = unterminated_rows(ids, mask, EOS)
    assert (rows, unterminated) == (10, 10)
    (v,) = check_rows_end(rows, unterminated, EOS, "<s> $A")
    assert v.rule == "documents-without-eos" and "'<s> $A'" in v.message and "</s>" in v.fix


def test_packed_rows_and_terminated_rows_are_not_judged():
    assert unterminated_rows(_packed(), np.ones((16, 12), dtype=int), EOS) == (0, 0)  # no padding: packed
    ids = np.full((10, 8), EOS)
    ids[:, :3] = [1, 5, 6]  # ends with the eos at 3
    mask = (np.arange(8) < 4).astype(int)[None].repeat(10, 0)
    assert check_rows_end(*unterminated_rows(ids, mask, EOS), EOS) == []

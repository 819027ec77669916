"""checks/document_attention.py: ``attention-crosses-documents`` from sampled rows and a probe's figure."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks.document_attention import (
    LEAK_TOLERANCE,
    check_document_attention,
    misplaced_position_rows,
)
from lightning_order.rules import RULES

EOS = 1
IDS = np.array([[5, 6, 1, 7, 8, 1, 9], [4, 4, 4, 1, 2, 3, 4]])
RIGHT = np.array([[0, 1, 2, 0, 1, 2, 0], [0, 1, 2, 3, 0, 1, 2]])


def test_positions_restarting_after_each_end_of_text_are_right() -> None:
    assert misplaced_position_rows(IDS, RIGHT, EOS) == 0
    # A row opening inside a document may continue its position: only the restarts are judged.
    assert misplaced_position_rows(IDS[:1], RIGHT[:1] + np.array([[7, 7, 7, 0, 0, 0, 0]]), EOS) == 0


@pytest.mark.parametrize(
    "positions",
    [
        np.tile(np.arange(7), (2, 1)),  # never restarting: today's positions
        np.array([[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 3, 0, 1, 2]]),  # restarting one token late in row 0
        np.array([[0, 1, 0, 1, 2, 3, 0], [0, 1, 2, 3, 0, 1, 2]]),  # restarting at the end-of-text itself
    ],
)
def test_positions_that_do_not_restart_exactly_after_end_of_text_are_counted(positions: np.ndarray) -> None:
    assert misplaced_position_rows(IDS, positions, EOS) >= 1


def test_a_correct_run_is_silent() -> None:
    assert check_document_attention(rows=8, has_positions=True, misplaced=0, leak=0.0) == []
    assert check_document_attention(rows=8, has_positions=True, leak=LEAK_TOLERANCE / 2) == []
    assert check_document_attention(rows=8, has_positions=True, leak=None) == []  # no probe: positions only
    assert check_document_attention(rows=0, has_positions=False) == []  # nothing sampled


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"has_positions": False}, "hold no position_ids"),
        ({"has_positions": True, "misplaced": 3}, "3 of 8 sampled train rows"),
        ({"has_positions": True, "leak": 0.5, "model": "LlamaForCausalLM"}, "LlamaForCausalLM ignores"),
    ],
)
def test_each_failure_is_attention_crosses_documents(kwargs: dict, named: str) -> None:
    [violation] = check_document_attention(rows=8, **kwargs)
    assert violation.rule == "attention-crosses-documents"
    assert violation.steps == ("train", "shard")
    assert named in violation.message and "document_attention" in violation.message
    assert violation.fix == RULES["attention-crosses-documents"].fix and "use_cache=False" in violation.fix


def test_a_leaking_model_is_told_what_transformers_needs() -> None:
    [violation] = check_document_attention(rows=4, has_positions=True, leak=0.2, model="GPT2LMHeadModel")
    assert "attention_mask" in violation.message and "use_cache = False" in violation.message
    assert violation.details["leak"] == 0.2

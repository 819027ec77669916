"""The end of a document as the model learns it: ``eos-label-masked`` and ``documents-without-eos``.

A model learns to stop from the end-of-text token's label. Two common pipelines take it away
without a crash. ``pad_token = eos_token`` with a collator that masks every pad id's label
(``DataCollatorForLanguageModeling``) sets every end-of-text label to -100 too
(``eos-label-masked``); and a Llama-style post-processor that adds ``<s>`` only leaves padded rows
that never end with ``</s>`` (``documents-without-eos``; its own rule, since ``pack-without-eos``
speaks of blocks concatenated without boundaries, and here nothing is concatenated). Pure
functions of plain arrays and ids; the rows are sampled by
:mod:`lightning_order.callbacks.validator.lm`. Both decide on most rows that can show it
(:data:`MASKED_SHARE`, at least :data:`MIN_ROWS`), so a few odd rows never decide alone.
"""

from __future__ import annotations

import numpy as np

from lightning_order.checks.label_shift import IGNORE_INDEX
from lightning_order.checks.token_rows import attended, is_padded, last_attended
from lightning_order.rules import Violation

__all__ = [
    "MASKED_SHARE",
    "MIN_ROWS",
    "UNTERMINATED_SHARE",
    "check_eos_labels",
    "check_rows_end",
    "masked_eos_rows",
    "unterminated_rows",
]

#: The share of rows that can show it from which the end of text is judged missing from the loss / rows.
MASKED_SHARE = 0.5
#: Rows that must show it before anything is judged.
MIN_ROWS = 8
#: The share of padded rows not ending with end-of-text from which the tokenizer is judged to add none
#: (a row truncated to the context may lose its end; nearly all rows losing it is no accident).
UNTERMINATED_SHARE = 0.9


def masked_eos_rows(
    input_ids: np.ndarray, labels: np.ndarray, attention_mask: np.ndarray | None, eos_id: int
) -> tuple[int, int]:
    """``(rows, masked)``: rows holding an attended end-of-text id, and those whose every such id has
    its label -100, read in either convention (labels equal to the inputs, or shifted by one)."""
    if input_ids.ndim != 2 or input_ids.shape != labels.shape:
        return 0, 0
    eos = (input_ids == eos_id) & attended(input_ids, attention_mask)
    ignored = labels == IGNORE_INDEX
    # Unshifted: the label at the end-of-text position; shifted: the one before it predicts it.
    before = np.zeros_like(ignored)
    before[:, 1:] = ignored[:, :-1]
    rows = eos.any(axis=1)
    same = ((ignored | ~eos).all(axis=1)) & rows
    shifted = ((before | ~eos).all(axis=1)) & rows & ~eos[:, 0]
    return int(rows.sum()), int((same | shifted).sum())


def check_eos_labels(rows: int, masked: int, pad_id: int | None, eos_id: int | None) -> list[Violation]:
    """``eos-label-masked``: the end-of-text label is -100 in most sampled rows holding one, and the
    pad id is the end-of-text id (the collator masked the pad id's labels, and with them every end).

    Args:
        rows: sampled train rows holding an end-of-text id (:func:`masked_eos_rows`).
        masked: those whose end-of-text labels are all -100.
        pad_id: the tokenizer's pad id.
        eos_id: its end-of-text id.
    """
    if pad_id is None or pad_id != eos_id or rows < MIN_ROWS or masked < MASKED_SHARE * rows:
        return []
    return [
        Violation(
            "eos-label-masked",
            ("train", "encode"),
            f"the pad id is the end-of-text id ({eos_id}), and in {masked} of {rows} sampled train rows holding "
            "an end-of-text token its label is -100: the collator masked every pad label, and with them every "
            "document's end; use a distinct pad token, or a collator that masks by attention_mask",
            details={"rows": rows, "masked": masked, "eos_id": eos_id, "pad_id": pad_id},
        )
    ]


def unterminated_rows(
    input_ids: np.ndarray, attention_mask: np.ndarray | None, eos_id: int
) -> tuple[int, int]:
    """``(rows, unterminated)`` of padded rows (none when the sample is packed): rows holding
    tokens, and those whose last attended token is not the end-of-text id."""
    if input_ids.ndim != 2 or attention_mask is None or not is_padded(attention_mask):
        return 0, 0
    last = last_attended(attended(input_ids, attention_mask))
    held = last >= 0
    ends = input_ids[np.arange(len(last)), np.maximum(last, 0)]
    return int(held.sum()), int((held & (ends != eos_id)).sum())


def check_rows_end(rows: int, unterminated: int, eos_id: int | None, adds: str = "") -> list[Violation]:
    """``documents-without-eos``: most padded train rows do not end with the end-of-text id.

    Args:
        rows: sampled padded train rows (:func:`unterminated_rows`).
        unterminated: those not ending with it.
        eos_id: the end-of-text id.
        adds: what the tokenizer's post-processor adds (``"<s> $A"``), named in the message when known.
    """
    if eos_id is None or rows < MIN_ROWS or unterminated < UNTERMINATED_SHARE * rows:
        return []
    template = f" (its post-processor: {adds!r})" if adds else ""
    return [
        Violation(
            "documents-without-eos",
            ("encode", "train"),
            f"{unterminated} of {rows} sampled padded train rows do not end with the end-of-text id ({eos_id}): "
            f"the tokenizer adds none{template}; end every row with it ('<s> $A </s>', add_eos_token=True, "
            "or append eos_token_id before padding)",
            details={"rows": rows, "unterminated": unterminated, "eos_id": eos_id, "template": adds},
        )
    ]

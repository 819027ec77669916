"""Instruction rows that keep none of their answer, read on a copy of the train dataset before step 1.

Gathering only (the judgement is :func:`lightning_order.checks.truncation.check_answers_cut_away`).
A dataset that trains on its prompts (a map-style dataset with a boolean ``mask_prompt`` set to
``False``, as litgpt's ``SFTDataset``) gives every row targets, so ``rows-without-target`` cannot
see a row cut inside its prompt. A shallow copy of the dataset with ``mask_prompt=True`` is read
by index (its first :data:`ANSWER_ROWS` rows, no sampler, no worker, the random states put back):
a row whose ``labels`` are then all ignored held no answer. The run's dataset is not modified.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.evidence import leaf_array, train_loader
from lightning_order.callbacks.validator.gather import agree
from lightning_order.callbacks.validator.peek import untouched
from lightning_order.checks.registry import EvidenceKind, Phase, register_check
from lightning_order.checks.truncation import AnswersKept, check_answers_cut_away

__all__ = ["ANSWER_ROWS", "answers_kept"]

log = logging.getLogger(__name__)

#: Rows read from the copy (the first ones, by index).
ANSWER_ROWS = 64


def answers_kept(dataset: Any, rows: int = ANSWER_ROWS) -> AnswersKept | None:
    """How many of ``dataset``'s first rows keep an answer once their prompt is masked.

    ``None`` when the dataset does not train on its prompts (no ``mask_prompt`` set to ``False``),
    is not map-style, or its rows carry no ``labels``.
    """
    if getattr(dataset, "mask_prompt", None) is not False or isinstance(dataset, torch.utils.data.IterableDataset):
        return None
    try:
        count = min(len(dataset), rows)
        masked = copy.copy(dataset)
        masked.mask_prompt = True
        ignore = getattr(dataset, "ignore_index", -100)
        without = 0
        with untouched(dataset) as unread:
            if unread is not None:
                return None
            for index in range(count):
                item = masked[index]
                labels = leaf_array(item.get("labels")) if isinstance(item, Mapping) else None
                if labels is None:
                    return None
                without += int(labels.size > 0 and bool(np.all(labels == ignore)))
    except Exception as err:  # a dataset that cannot be copied or read here: no evidence, the run goes on
        log.debug("OrderValidator: could not read the train rows with their prompt masked (%s)", err)
        return None
    length = getattr(dataset, "max_seq_length", None)
    cut = int(length) if isinstance(length, int) and length > 0 else None
    return AnswersKept(rows=count, without_answer=without, max_seq_length=cut)


def _gather_answers(trainer: Any, evidence: Any) -> list[dict[str, Any]]:
    loader = train_loader(trainer)
    kept = answers_kept(getattr(loader, "dataset", None))
    return [v.to_dict() for v in check_answers_cut_away(kept)]


# At train start, off the loader Lightning will iterate; every rank reads its own (the same rows).
register_check(
    "answers-cut-away",
    lambda evidence: agree(list(evidence.ranks)),
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.RANKS],
    rules=["rows-without-target"],
    gather=_gather_answers,
    order=40,
)

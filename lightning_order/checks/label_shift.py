"""``labels-shifted-twice``: labels already shifted by one, fed to a model that shifts them itself.

``transformers`` causal LMs take ``labels`` equal to ``input_ids`` and shift them inside their
loss; labels already shifted (``labels[:, :-1] == input_ids[:, 1:]``, the convention of models
that do not shift, such as :class:`~lightning_order.OrderedCausalLM`) make them learn the token
after next, and every step runs. Pure functions of plain arrays and booleans: whether the model
shifts is read off the module by :mod:`lightning_order.models.hf`, the sampled train rows by
:mod:`lightning_order.callbacks.validator.lm`. A sample decides on (almost) every row
(:data:`PRESHIFTED_SHARE`), so a few rows of one repeated token or odd padding never decide alone.
"""

from __future__ import annotations

import numpy as np

from lightning_order.rules import Violation

__all__ = [
    "IGNORE_INDEX",
    "PRESHIFTED_SHARE",
    "check_label_shift",
    "check_unshifted_labels",
    "preshifted_rows",
    "unshifted_rows",
]

#: The share of sampled rows with pre-shifted labels from which a self-shifting model is fed them
#: (a row of one repeated token is both shifted and not, and a few odd rows must not hide the rest).
PRESHIFTED_SHARE = 0.9
#: The label of positions left out of the loss (``transformers``' and ``cross_entropy``'s default).
IGNORE_INDEX = -100


def _rows_equal(inputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per row: every kept label (not ``-100``) equals its input, and at least one is kept."""
    kept = labels != IGNORE_INDEX
    return ((inputs == labels) | ~kept).all(axis=1) & kept.any(axis=1)


def preshifted_rows(input_ids: np.ndarray, labels: np.ndarray) -> int:
    """The rows (of ``B × T`` arrays) whose labels are the inputs shifted by one: ``labels[:, :-1] == input_ids[:, 1:]``.

    Positions labelled ``-100`` are left out; a row whose labels also equal its inputs unshifted
    (one repeated token) is not counted, since it shows neither convention.
    """
    if input_ids.ndim != 2 or input_ids.shape != labels.shape or input_ids.shape[1] < 2:
        return 0
    shifted = _rows_equal(input_ids[:, 1:], labels[:, :-1])
    return int((shifted & ~_rows_equal(input_ids, labels)).sum())


def check_label_shift(
    shifts_itself: bool, preshifted: int, rows: int, model: str = "the model"
) -> list[Violation]:
    """``labels-shifted-twice``: a model that shifts labels itself, fed labels already shifted on (almost) every row.

    Args:
        shifts_itself: the model shifts ``labels`` inside its loss (a ``transformers`` causal LM).
        preshifted: sampled train rows whose labels are the inputs shifted by one (:func:`preshifted_rows`).
        rows: the sampled train rows.
        model: the model's class name, for the message.
    """
    if not shifts_itself or rows <= 0 or preshifted < PRESHIFTED_SHARE * rows:
        return []
    return [
        Violation(
            "labels-shifted-twice",
            ("train", "shard"),
            f"{model} shifts labels inside its loss, and {preshifted} of {rows} sampled train rows hold labels "
            "already shifted by one (labels[:, :-1] == input_ids[:, 1:]): it would train on the token after next; "
            'use OrderedLMDataModule(batch_format="hf") (or "auto"), or labels equal to input_ids',
            details={"preshifted_rows": preshifted, "rows": rows, "model": model},
        )
    ]


def unshifted_rows(input_ids: np.ndarray, labels: np.ndarray) -> int:
    """The rows whose labels equal their inputs, position by position (the ``transformers`` convention).

    Positions labelled ``-100`` are left out; a row whose labels are also its inputs shifted by one
    (one repeated token) is not counted, since it shows neither convention.
    """
    if input_ids.ndim != 2 or input_ids.shape != labels.shape or input_ids.shape[1] < 2:
        return 0
    shifted = _rows_equal(input_ids[:, 1:], labels[:, :-1])
    return int((_rows_equal(input_ids, labels) & ~shifted).sum())


def check_unshifted_labels(unshifted: int, rows: int, model: str = "the model") -> list[Violation]:
    """``labels-not-shifted``: a model that does not shift labels (it predicts ``labels[t]`` at position
    ``t``) fed labels equal to its inputs on (almost) every sampled row: it would learn to copy.

    Args:
        unshifted: sampled train rows whose labels equal their inputs (:func:`unshifted_rows`).
        rows: the sampled train rows.
        model: the model's class name, for the message.
    """
    if rows <= 0 or unshifted < PRESHIFTED_SHARE * rows:
        return []
    return [
        Violation(
            "labels-not-shifted",
            ("train", "shard"),
            f"{model} predicts labels[t] at position t without shifting them, and {unshifted} of {rows} sampled "
            "train rows hold labels equal to their inputs: it would learn to copy its input; "
            'use OrderedLMDataModule(batch_format="shifted") (or "auto")',
            details={"unshifted_rows": unshifted, "rows": rows, "model": model},
        )
    ]

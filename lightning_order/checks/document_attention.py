"""``attention-crosses-documents``: with document-aware packing on, attention still reaches the previous document.

``OrderedLMDataModule(document_attention=True)`` serves ``position_ids`` that restart at 0 after
every end-of-text id, and the model keeps each token's attention inside its own document. Either
half can fail without an error: batches whose positions do not restart exactly there (a
hand-written collator, a positions bug), or a model that ignores them (a ``transformers`` model
given an ``attention_mask``, or one with its key-value cache on, falls back to plain causal
attention over the whole block). Pure functions of plain arrays and numbers: the sampled train
rows and the probe's logits are gathered by :mod:`lightning_order.callbacks.validator.lm`.
"""

from __future__ import annotations

import numpy as np

from lightning_order.rules import Violation

__all__ = ["LEAK_TOLERANCE", "check_document_attention", "misplaced_position_rows"]

#: The largest change of a later document's logits when the previous document's tokens change, as a
#: share of the change of that document's end-of-text logits, that still counts as none (kernels may add in
#: another order; a model that attends across the boundary moves them by a sizeable share).
LEAK_TOLERANCE = 1e-3


def misplaced_position_rows(input_ids: np.ndarray, position_ids: np.ndarray, eos_id: int) -> int:
    """The rows (of ``B × T`` arrays) whose positions do not restart exactly after each ``eos_id``.

    A row is right when, from its second token on, the position is 0 right after an end-of-text id
    and the previous position plus one everywhere else (its first token may hold any position: a
    block usually opens inside a document).
    """
    if input_ids.ndim != 2 or input_ids.shape != position_ids.shape:
        return int(input_ids.shape[0]) if input_ids.ndim == 2 else 0
    expected = np.where(input_ids[:, :-1] == eos_id, 0, position_ids[:, :-1] + 1)
    return int((position_ids[:, 1:] != expected).any(axis=1).sum())


def check_document_attention(
    *,
    rows: int,
    has_positions: bool,
    misplaced: int = 0,
    leak: float | None = None,
    model: str = "the model",
) -> list[Violation]:
    """``attention-crosses-documents`` when document-aware packing is on (call it only then).

    Args:
        rows: the sampled train rows.
        has_positions: the batches hold ``position_ids``.
        misplaced: sampled rows whose positions do not restart exactly after end-of-text ids
            (:func:`misplaced_position_rows`).
        leak: the largest change of the next document's logits when the previous document's tokens
            change, as a share of the change of that document's end-of-text logits (a probe forward);
            ``None`` when no probe ran.
        model: the model's class name, for the message.
    """
    if rows <= 0:
        return []
    found: list[str] = []
    details: dict[str, object] = {"rows": rows, "model": model}
    if not has_positions:
        found.append(
            "the train batches hold no position_ids, so nothing tells the model where a document starts; "
            "serve OrderedLMDataModule(document_attention=True) batches unchanged"
        )
    elif misplaced:
        details["misplaced_rows"] = misplaced
        found.append(
            f"{misplaced} of {rows} sampled train rows hold position_ids that do not restart at 0 exactly after "
            "each end-of-text id; compute them with lightning_order.models.attention.document_positions"
        )
    if leak is not None and leak > LEAK_TOLERANCE:
        details["leak"] = leak
        found.append(
            f"{model} ignores the document boundaries: changing the previous document's tokens moved the next "
            f"document's logits by {leak:.3g} times the move of its own end-of-text's; use OrderedCausalLM, or feed a transformers model no "
            "attention_mask and set model.config.use_cache = False (transformers reads packed position_ids "
            "only then)"
        )
    if not found:
        return []
    return [
        Violation(
            "attention-crosses-documents",
            ("train", "shard"),
            "document_attention is on, but attention crosses document boundaries: " + "; ".join(found),
            details=details,
        )
    ]

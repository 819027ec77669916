"""What the validator gathers when document-aware packing is on (the judgement is
:func:`~lightning_order.checks.document_attention.check_document_attention`).

The option is read from the datamodule's ledger (``info["document_attention"]``, recorded at
``setup`` by :class:`~lightning_order.OrderedLMDataModule`) or its config. From the train batch
the LM checks already drew: whether it holds ``position_ids`` and whether they restart exactly
after each end-of-text id; then one probe, cheap and side-effect free: one row holding a document
boundary is run through the model twice (eval mode, no gradients, the training mode restored),
once with the tokens of the document before the boundary changed, and the next document's logits
are compared with how far the logits of that document's end-of-text move (a token unchanged
that may attend to the changed ones: a relative figure, since a small model at random
initialisation moves little either way). A model that keeps documents apart gives
the same logits. The probe runs for the
models whose call form is known: :class:`~lightning_order.OrderedCausalLM` (the batch) and a
``transformers`` causal LM in the module (the batch as keywords, as ``model(**batch)`` trains).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from lightning_order.callbacks.validator.batches import as_numpy, batch_field
from lightning_order.callbacks.validator.evidence import datamodule_ledger
from lightning_order.checks.document_attention import check_document_attention, misplaced_position_rows
from lightning_order.models.hf import hf_causal_lm
from lightning_order.rules import Violation

__all__ = ["document_attention_on", "document_violations", "probe_leak"]

log = logging.getLogger(__name__)


def document_attention_on(dm: Any) -> bool:
    """Whether ``dm`` serves document-aware batches: its ledger's ``info["document_attention"]``, else its config's."""
    ledger = datamodule_ledger(dm)
    recorded = ledger.info.get("document_attention") if ledger is not None else None
    if isinstance(recorded, bool):
        return recorded
    return getattr(getattr(dm, "config", None), "document_attention", False) is True


def _boundary(ids: torch.Tensor, eos_id: int) -> tuple[int, int] | None:
    """A ``(row, eos_index)`` with at least two tokens before the end-of-text id and one after it."""
    for row in range(ids.shape[0]):
        hits = (ids[row, :-1] == eos_id).nonzero().flatten().tolist()
        # The first end-of-text of the row: the tokens before it are all in one (previous) document.
        if hits and hits[0] >= 2:
            return row, int(hits[0])
    return None


def _logits(module: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
    from lightning_order.models.causal_lm import OrderedCausalLM

    model = hf_causal_lm(module)
    if model is not None:
        logits: torch.Tensor = model(**inputs).logits
        return logits
    if isinstance(module, OrderedCausalLM):
        return torch.as_tensor(module(inputs))
    return None  # an unknown call form: no probe


def probe_leak(module: Any, batch: Mapping[str, Any], eos_id: int) -> float | None:
    """How far the next document's logits move when the previous document's tokens change, relative to how
    far the logits of that document's end-of-text move (0: kept apart); ``None``: no probe.

    One row of ``batch`` with a boundary, its ``labels`` left out; the tokens before its first
    end-of-text id are rotated by one (the same ids, another text; the end-of-text id kept, so the
    positions stay the same).
    """
    ids = batch.get("input_ids")
    if not torch.is_tensor(ids) or ids.ndim != 2:
        return None
    found = _boundary(ids, eos_id)
    if found is None:
        return None
    row, eos_at = found
    changed = ids[row : row + 1].clone()
    changed[0, :eos_at] = changed[0, :eos_at].roll(1)
    if torch.equal(changed, ids[row : row + 1]):
        return None  # one repeated token: nothing to change
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    inputs = {
        k: v[row : row + 1].to(device) for k, v in batch.items() if k != "labels" and torch.is_tensor(v)
    }
    was_training = module.training
    module.eval()  # no dropout: the two forwards differ only by the changed tokens
    try:
        with torch.no_grad():
            before = _logits(module, inputs)
            after = _logits(module, {**inputs, "input_ids": changed.to(device)})
    finally:
        module.train(was_training)
    if before is None or after is None:
        return None
    moved = _largest((before[0] - after[0]).float())
    # The end-of-text token is unchanged and may attend to the changed tokens: the reference move.
    reference, next_document = float(moved[eos_at]), moved[eos_at + 1 :]
    if not next_document.numel() or reference == 0.0:
        return None  # the model's logits do not depend on the earlier tokens at all: nothing to compare
    return float(next_document.max()) / reference


def _largest(diff: torch.Tensor) -> torch.Tensor:
    """Per position, the largest absolute change of a finite logit (padding rows are ``-inf`` in both)."""
    return torch.where(torch.isfinite(diff), diff.abs(), torch.zeros_like(diff)).amax(dim=-1)


def document_violations(dm: Any, module: Any, batch: Any, eos_id: int | None) -> list[Violation]:
    """``attention-crosses-documents`` for a run with document-aware packing on (nothing otherwise).

    Args:
        dm: the datamodule.
        module: the LightningModule (or model).
        batch: the sampled train batch (a dict).
        eos_id: the end-of-text id (``None``: unknown, nothing to judge).
    """
    if dm is None or eos_id is None or not isinstance(batch, Mapping) or not document_attention_on(dm):
        return []
    ids, positions = as_numpy(batch_field(batch, "input_ids")), as_numpy(batch_field(batch, "position_ids"))
    if ids is None or ids.ndim != 2:
        return []
    misplaced = 0 if positions is None else misplaced_position_rows(ids, positions, eos_id)
    leak = None
    if positions is not None and not misplaced:
        try:
            leak = probe_leak(module, batch, eos_id)
        except Exception as err:  # a model that cannot run one row here: the positions are still judged
            log.info("OrderValidator: no attention probe on %s (%s)", type(module).__name__, err)
    model = hf_causal_lm(module)
    return check_document_attention(
        rows=int(ids.shape[0]),
        has_positions=positions is not None,
        misplaced=misplaced,
        leak=leak,
        model=type(model if model is not None else module).__name__,
    )

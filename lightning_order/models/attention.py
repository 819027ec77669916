"""Document-aware attention for packed blocks: per-document positions and a block-diagonal causal mask.

A packed block holds the end of one document, whole documents and the start of another, each
ended by an end-of-text id. Keeping them apart needs two things, both read off ``position_ids``
(the form ``transformers`` reads for packed sequences, and ``DataCollatorWithFlattening`` gives):
positions that restart at 0 where a document starts (the token after an end-of-text id, so a
BOS there is position 0), and a mask that lets a token attend only to earlier tokens of its own
document. A document starts wherever ``position_ids`` is 0, and at a row's first token (a block
usually opens inside a document; it is counted as a document start, as in every packed trainer,
since the tokens before it are in another block).

The mask is a boolean ``B × 1 × T × T`` tensor for :func:`torch.nn.functional.scaled_dot_product_attention`
(``True``: may attend): it runs on CPU and GPU alike; ``flex_attention`` would save the ``T × T``
memory at long blocks but needs compilation, which this reference model does without.
"""

from __future__ import annotations

import torch

__all__ = ["document_ids", "document_mask", "document_positions"]


def document_positions(input_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Per-document positions of ``input_ids`` (``B × T``): 0 at each row's first token and after each ``eos_id``.

    Args:
        input_ids: token ids, long, ``B × T`` (or ``T``).
        eos_id: the end-of-text id that ends every document.

    Returns:
        ``position_ids``, long, the shape of ``input_ids``.
    """
    steps = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(input_ids)
    starts = torch.zeros_like(input_ids, dtype=torch.bool)
    starts[..., 0] = True
    starts[..., 1:] = input_ids[..., :-1] == eos_id
    # The index of the latest document start at or before each token (a running maximum).
    last_start = torch.cummax(torch.where(starts, steps, torch.zeros_like(steps)), dim=-1).values
    return steps - last_start


def document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """The index of each token's document within its row (0, 1, ...): a new one where ``position_ids`` is 0.

    A row's first token always opens a document, whatever its position.
    """
    starts = position_ids == 0
    starts[..., 0] = True
    return starts.long().cumsum(-1) - 1


def document_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """The block-diagonal causal mask (``B × 1 × T × T``, ``True``: may attend) of ``position_ids`` (``B × T``).

    Query ``q`` attends to key ``k`` when ``k <= q`` and both are in the same document.
    """
    docs = document_ids(position_ids)
    length = position_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=position_ids.device).tril()
    same = docs.unsqueeze(-1) == docs.unsqueeze(-2)
    return (same & causal).unsqueeze(1)

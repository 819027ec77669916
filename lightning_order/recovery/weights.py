"""Weight repairs, as plain functions of tensors and modules.

One rule underlies them all: a weight that still means the same thing (same name, same shape)
is kept; an embedding table is moved row by row to its tokens' new ids; everything else gets the
freshly built model's init. :func:`transplant` is that rule, and every repair goes through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["model_hparams", "remap_embedding", "remap_token_embeddings", "reinit_mismatched", "transplant"]


def model_hparams(model: nn.Module) -> dict[str, Any]:
    """The model's saved hyper-parameters as a dict (empty when it saved none)."""
    return dict(getattr(model, "hparams", {}) or {})


def transplant(
    old_state: Mapping[str, torch.Tensor], model: nn.Module, skip: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """Copies ``old_state`` into ``model`` wherever the name and the shape match.

    Args:
        old_state: the old weights (a ``state_dict``).
        model: the freshly built model; changed in place.
        skip: names left alone (already repaired another way, e.g. a remapped embedding).

    Returns:
        ``(kept, fresh)``: the names copied from ``old_state``, and the names that keep the
        model's own init (new, or of another shape), each in the model's order.
    """
    skipped = set(skip)
    state = model.state_dict()
    kept = [
        name
        for name, value in state.items()
        if name not in skipped and name in old_state and tuple(old_state[name].shape) == tuple(value.shape)
    ]
    model.load_state_dict({name: old_state[name] for name in kept}, strict=False)
    fresh = [name for name in state if name not in kept and name not in skipped]
    return kept, fresh


def remap_embedding(
    old_weight: torch.Tensor,
    old_vocab: Mapping[str, int],
    new_vocab: Mapping[str, int],
    init: torch.Tensor | Callable[[torch.Tensor], Any] | None = None,
    num_embeddings: int | None = None,
) -> torch.Tensor:
    """Moves embedding rows from the old vocabulary's ids to the new one's, by token string.

    A token present in both vocabularies keeps its learned row, bit for bit, at its new id. Rows
    of tokens only in the new vocabulary come from ``init``.

    Args:
        old_weight: the old table, ``len(old vocab ids) x dim``.
        old_vocab: token -> id of the old vocabulary.
        new_vocab: token -> id of the new vocabulary.
        init: the rows for new tokens: a tensor of the new table's shape (e.g. a freshly built
            model's embedding), or a function that fills a tensor in place (e.g.
            ``torch.nn.init.normal_``, the default, like ``nn.Embedding``).
        num_embeddings: rows of the new table (default: the largest new id + 1).

    Returns:
        The new table (a new tensor, same dtype and device as ``old_weight``).
    """
    rows = num_embeddings if num_embeddings is not None else max(new_vocab.values(), default=-1) + 1
    if isinstance(init, torch.Tensor):
        if init.shape != (rows, old_weight.shape[1]):
            raise ValueError(
                f"init has shape {tuple(init.shape)}, expected ({rows}, {old_weight.shape[1]}) "
                "(new vocabulary size x embedding dim)"
            )
        new = init.detach().to(dtype=old_weight.dtype, device=old_weight.device).clone()
    else:
        new = torch.empty(rows, old_weight.shape[1], dtype=old_weight.dtype, device=old_weight.device)
        (init or nn.init.normal_)(new)
    pairs = [
        (new_id, old_vocab[token])
        for token, new_id in new_vocab.items()
        if token in old_vocab and new_id < rows and old_vocab[token] < old_weight.shape[0]
    ]
    if pairs:
        new_ids = torch.tensor([p[0] for p in pairs], device=new.device)
        old_ids = torch.tensor([p[1] for p in pairs], device=new.device)
        with torch.no_grad():
            new[new_ids] = old_weight.detach()[old_ids]
    return new


def remap_token_embeddings(
    model: nn.Module,
    old_state: Mapping[str, torch.Tensor],
    old_vocab: Mapping[str, int],
    new_vocab: Mapping[str, int],
) -> dict[str, dict[str, int]]:
    """Remaps, in place, every token table of ``model`` from ``old_vocab`` ids to ``new_vocab`` ids.

    A token table is an ``nn.Embedding`` whose old weight covers every old id and has the same
    width; others (position tables) are left to :func:`transplant`.

    Returns:
        Per remapped weight name, ``{"common": tokens in both vocabularies, "new": tokens only in
        the new one}``.
    """
    remapped: dict[str, dict[str, int]] = {}
    common = sum(1 for token in new_vocab if token in old_vocab)
    for name, module in model.named_modules():
        weight_name = f"{name}.weight" if name else "weight"
        old = old_state.get(weight_name)
        if not isinstance(module, nn.Embedding) or old is None:
            continue
        if old.shape[0] < max(old_vocab.values()) + 1 or old.shape[1] != module.embedding_dim:
            continue  # not a token table (e.g. positions)
        table = remap_embedding(
            old, old_vocab, new_vocab, init=module.weight, num_embeddings=module.num_embeddings
        )
        with torch.no_grad():
            module.weight.copy_(table)
        remapped[weight_name] = {"common": common, "new": len(new_vocab) - common}
    return remapped


def reinit_mismatched(
    model: nn.Module, dims: Mapping[str, Any], model_cls: type[nn.Module] | None = None
) -> list[str]:
    """Re-initialises, in place, only the layers whose shapes no longer match the data's dims.

    A reference model is built from the model's hyper-parameters with ``dims`` applied and the
    model's weights are :func:`transplant` ed into it; each submodule of ``model`` owning a
    tensor whose shape changed is then replaced by the reference's submodule (fresh where the
    shape changed, the old values where it did not). Everything else is untouched. The optimizer
    must be rebuilt (``trainer.fit`` calls ``configure_optimizers`` again); ``model.hparams``
    take the new dims.

    Args:
        model: the model built before the data (e.g. with a default ``vocab_size``).
        dims: the data's dims (``datamodule.dims``).
        model_cls: the class to build the reference with (default: ``type(model)``).

    Returns:
        The names of the re-initialised parameters and buffers, sorted.

    Raises:
        ValueError: a tensor of the model itself (not of a submodule) changed shape; rebuild
            the model from the dims instead.
    """
    reference = (model_cls or type(model))(**{**model_hparams(model), **dims})
    _, fresh = transplant(model.state_dict(), reference)
    owners = sorted({name.rpartition(".")[0] for name in fresh}, key=len)
    if "" in owners:
        raise ValueError(
            "the model's own top-level parameters do not match the dims; rebuild it from the dims"
        )
    replaced: list[str] = []
    for owner in owners:
        if any(owner == done or owner.startswith(done + ".") for done in replaced):
            continue
        parent_name, _, child = owner.rpartition(".")
        setattr(
            model.get_submodule(parent_name) if parent_name else model, child, reference.get_submodule(owner)
        )
        replaced.append(owner)
    hparams = getattr(model, "hparams", None)
    if hparams is not None and hasattr(hparams, "update"):
        hparams.update(dict(dims))
    return sorted(fresh)

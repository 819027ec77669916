"""The data dims a model was built for, read off the module: its ``hparams`` and its input layers.

Gathering only (the judgement is :func:`lightning_order.checks.model.check_model_dims`). The
``hparams`` keys read are the dims of every pipeline (:func:`lightning_order.pipelines.all_dims`),
so a pipeline's new dim is checked without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from lightning_order.checks.model import check_model_dims
from lightning_order.checks.resume import check_restore_shapes
from lightning_order.pipelines import all_dims
from lightning_order.rules import Violation

__all__ = ["model_dims", "restore_violations"]


def model_dims(module: nn.Module) -> dict[str, Any]:
    """The data dims a module was built for: integer ``hparams`` of the pipelines' dims, the rows
    of its token embedding (``embedding_rows``) and the input width of its features layer
    (``feature_in``), whichever exist."""
    dims: dict[str, Any] = {}
    hparams = getattr(module, "hparams", None) or {}
    for key in all_dims():
        value = hparams.get(key) if isinstance(hparams, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            dims[key] = value
    for name, layer in module.named_modules():
        # The token table: the first embedding that is not a position table.
        if isinstance(layer, nn.Embedding) and "pos" not in name.lower() and "embedding_rows" not in dims:
            dims["embedding_rows"] = int(layer.num_embeddings)
        if isinstance(layer, nn.Linear) and "feature" in name.lower() and "feature_in" not in dims:
            if not isinstance(layer, nn.LazyLinear) or layer.in_features:
                dims["feature_in"] = int(layer.in_features)
    return dims


def restore_violations(
    module: nn.Module, checkpoint: Mapping[str, Any], dims: Mapping[str, Any], observed: Mapping[str, Any]
) -> list[Violation]:
    """Weights of ``checkpoint`` that cannot load into ``module``, named by the order error behind
    them (:func:`~lightning_order.checks.resume.check_restore_shapes`); ``dims``: the data's dims,
    ``observed``: what sampled batches showed."""
    stored = {
        k: tuple(v.shape) for k, v in (checkpoint.get("state_dict") or {}).items() if torch.is_tensor(v)
    }
    if not stored:
        return []
    model = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    fits = not check_model_dims(model_dims(module), dict(dims), observed=dict(observed))
    return check_restore_shapes(stored, model, model_fits_data=fits)

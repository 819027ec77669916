"""What the validator reads off a datamodule's batches and a model, and how ranks share it.

Gathering only, over duck-typed objects (any datamodule, any module); the judgements are in
:mod:`lightning_order.checks`. Moved out of ``order_validator.py`` to keep that module small.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from lightning_order.checks.ledger import DIM_KEYS
from lightning_order.checks.report import merge_violations
from lightning_order.ledger import StepLedger
from lightning_order.recording import recorded_fingerprints
from lightning_order.rules import Violation

__all__: list[str] = []

log = logging.getLogger(__name__)

_KEY_HASH = "key_hash"


def _ledger(dm: Any) -> StepLedger | None:
    ledger = getattr(dm, "ledger", None) if dm is not None else None
    return ledger if isinstance(ledger, StepLedger) else None


def _data_fingerprints(dm: Any) -> dict[str, str]:
    """``dm.data_fingerprints()`` (any datamodule may define it), else those a recorded ledger holds."""
    method = getattr(dm, "data_fingerprints", None)
    if not callable(method):
        ledger = _ledger(dm)
        return recorded_fingerprints(ledger) if ledger is not None else {}
    return {str(k): str(v) for k, v in (method() or {}).items() if v is not None}


def _data_dims(dm: Any) -> dict[str, Any]:
    dims = getattr(dm, "dims", None) if dm is not None else None
    return {k: v for k, v in dims.items() if v is not None} if isinstance(dims, Mapping) else {}


def _split_key_hashes(dm: Any, split: str) -> np.ndarray | None:
    """The ``key_hash`` column of a split (this rank's shard for train), read from Arrow alone.

    A datamodule may offer ``key_hashes(split)``; otherwise the column is read from the dataset
    behind its dataloader (``OrderedDataModule`` keeps it in every encoded split).
    """
    method = getattr(dm, "key_hashes", None)
    if callable(method):
        hashes = method(split)
        return None if hashes is None else np.asarray(hashes, dtype=np.int64)
    try:
        loader = getattr(dm, f"{split}_dataloader")()
    except Exception as err:  # no such split, or not set up: no hashes
        log.debug("OrderValidator: no %s key hashes (%s)", split, err)
        return None
    dataset = getattr(loader, "dataset", None)
    if _KEY_HASH not in (getattr(dataset, "column_names", None) or ()):
        return None
    # Arrow format reads the column (through any shard/select indices) without per-row Python.
    return dataset.with_format("arrow")[_KEY_HASH].to_numpy().astype(np.int64, copy=False)


def _sample(dm: Any, loader_name: str, rows: int) -> tuple[Any, int | None]:
    """Up to ``rows`` rows of a datamodule's dataloader, collated as one batch, and the dataset size.

    Map-style datasets are indexed directly (a fixed seed, so every rank samples the same rows of
    the same data) without starting workers; iterable ones yield their first batches.
    """
    try:
        loader = getattr(dm, loader_name)()
    except Exception as err:  # a datamodule without that split, or not ready: nothing to sample
        log.debug("OrderValidator: no %s to sample (%s)", loader_name, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if loader is None or dataset is None:
        return None, None
    collate = getattr(loader, "collate_fn", None) or torch.utils.data.default_collate
    if not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__len__"):
        size = len(dataset)
        if size == 0:
            return None, 0
        picked = np.sort(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False))
        getitems = getattr(dataset, "__getitems__", None)
        items = getitems(picked.tolist()) if callable(getitems) else [dataset[int(i)] for i in picked]
        return collate(items), size
    batches, seen = [], 0
    for batch in loader:
        batches.append(batch)
        seen += len(_get(batch, "labels") if _get(batch, "labels") is not None else batch[0])
        if seen >= rows:
            break
    return (_concat(batches) if batches else None), None


def _get(batch: Any, key: str) -> Any:
    if isinstance(batch, Mapping):
        return batch.get(key)
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        first = batch[0]
        if key == "labels":
            return batch[-1]
        is_float = torch.is_tensor(first) and first.is_floating_point()
        if key == "features" and is_float:
            return first
        if key == "input_ids" and torch.is_tensor(first) and not is_float:
            return first
    return None


def _concat(batches: list[Any]) -> Any:
    if isinstance(batches[0], Mapping):
        return {k: torch.cat([b[k] for b in batches]) for k in batches[0] if torch.is_tensor(batches[0][k])}
    return type(batches[0])(torch.cat([b[i] for b in batches]) for i in range(len(batches[0])))


def _as_numpy(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _inputs(batch: Any) -> list[np.ndarray]:
    """The model inputs of a batch (everything but the labels), as numpy arrays."""
    if batch is None:
        return []
    if isinstance(batch, Mapping):
        keys = [k for k in sorted(batch) if k not in ("labels", "label", "y", _KEY_HASH)]
        return [a for a in (_as_numpy(batch[k]) for k in keys) if a is not None and a.ndim >= 1]
    if isinstance(batch, (list, tuple)) and len(batch) >= 2:
        return [a for a in (_as_numpy(x) for x in batch[:-1]) if a is not None and a.ndim >= 1]
    return []


def _observed_dims(batch: Any) -> dict[str, Any]:
    """What a sampled batch shows about the data's dims (lower bounds)."""
    observed: dict[str, Any] = {}
    ids = _as_numpy(_get(batch, "input_ids"))
    if ids is not None and ids.size and np.issubdtype(ids.dtype, np.integer):
        observed["max_token_id"] = int(ids.max())
    features = _as_numpy(_get(batch, "features"))
    if features is not None and features.ndim == 2:
        observed["num_features"] = int(features.shape[1])
    labels = _as_numpy(_get(batch, "labels"))
    if labels is not None and labels.size and np.issubdtype(labels.dtype, np.integer) and labels.ndim == 1:
        observed["max_label"] = int(labels.max())
    return observed


def _model_dims(module: nn.Module) -> dict[str, Any]:
    """The data dims a module was built for: ``hparams`` keys and the shapes of its input layers."""
    dims: dict[str, Any] = {}
    hparams = getattr(module, "hparams", None) or {}
    for key in DIM_KEYS:
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


def _all_gather(trainer: Any, obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order (a one-element list in a single process)."""
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, obj)
        return gathered
    return [obj]


def _agree(per_rank: list[list[dict[str, Any]]]) -> list[Violation]:
    """One list from every rank's violations (as dicts), identical on every rank.

    Rank 0's violations come first, all of them; another rank adds what rank 0 did not report
    under the same rule and steps (ranks word the same finding with their own fingerprints).
    """
    found: list[Violation] = []
    for rank, dicts in enumerate(per_rank):
        known = {(v.rule, v.steps) for v in found}
        for d in dicts:
            violation = Violation.from_dict(d)
            if rank == 0 or (violation.rule, violation.steps) not in known:
                found.append(violation)
    return merge_violations(found)

"""What the validator reads off a run for every check: the datamodule's word, its items, the model's dims.

Gathering only, over duck-typed objects (``OrderedDataModule``, ``OrderedLMDataModule``, a
hand-written datamodule that records its steps, or any other); the judgements are pure functions
in :mod:`lightning_order.checks`, registered in :mod:`lightning_order.checks.registry`. Three
sources, each read the same way by every check that needs it:

- what a datamodule says about its own data: its ledger, data fingerprints, dims, key hashes and
  the spec that judges it (the ledger and its pipeline are read by :mod:`lightning_order.recorder`,
  which the monitor shares);
- the items behind its dataloaders: each split's map-style dataset and an item's leaves by path
  (an iterable dataset is not indexable and is skipped: documented limit);
- the dims a model was built for: its ``hparams`` (the dims of every pipeline,
  :func:`lightning_order.pipelines.all_dims`, so a pipeline's new dim is checked without a change
  here) and its input layers.

The checks judged on these alone are registered here: the ledger against its pipeline
(``setup``) and the model's dims against the data's (``fit-start``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from lightning_order.callbacks.validator.state import ValidatorState
from lightning_order.checks.ledger import judged_pipeline
from lightning_order.checks.model import check_model_dims
from lightning_order.checks.registry import (
    CheckEvidence,
    EvidenceKind,
    Phase,
    register_check,
    registered_checks,
)
from lightning_order.checks.resume import check_restore_shapes
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.pipelines import all_dims, spec_for, spec_of_class
from lightning_order.recorder import datamodule_ledger, ledger_pipeline, recorded_fingerprints
from lightning_order.rules import Violation
from lightning_order.spec import PipelineSpec

__all__ = [
    "KEY_HASH",
    "SPLIT_LOADERS",
    "data_dims",
    "data_fingerprints",
    "datamodule_ledger",
    "is_label",
    "leaf_array",
    "leaves",
    "ledger_violations",
    "model_dims",
    "phase_evidence",
    "restore_violations",
    "spec_of",
    "split_dataset",
    "split_key_hashes",
    "train_loader",
]

log = logging.getLogger(__name__)

#: The column of an encoded split that holds the hash of each row's cleaned key.
KEY_HASH = "key_hash"


# -- what a datamodule says ------------------------------------------------------------------
def data_fingerprints(dm: Any) -> dict[str, str]:
    """``dm.data_fingerprints()`` (any datamodule may define it), else those a recorded ledger holds."""
    method = getattr(dm, "data_fingerprints", None)
    if not callable(method):
        ledger = datamodule_ledger(dm)
        return recorded_fingerprints(ledger) if ledger is not None else {}
    return {str(k): str(v) for k, v in (method() or {}).items() if v is not None}


def data_dims(dm: Any) -> dict[str, Any]:
    """``dm.dims`` without its ``None`` values (``{}`` when the datamodule has none)."""
    dims = getattr(dm, "dims", None) if dm is not None else None
    return {k: v for k, v in dims.items() if v is not None} if isinstance(dims, Mapping) else {}


def split_key_hashes(dm: Any, split: str) -> np.ndarray | None:
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
    if KEY_HASH not in (getattr(dataset, "column_names", None) or ()):
        return None
    # Arrow format reads the column (through any shard/select indices) without per-row Python.
    return dataset.with_format("arrow")[KEY_HASH].to_numpy().astype(np.int64, copy=False)


def spec_of(dm: Any, ledger: StepLedger | None = None) -> PipelineSpec | None:
    """The registered spec ``dm`` belongs to: its class's, else the one its ledger names; ``None``: none.

    A datamodule of no registered class with no ledger (zero glue) belongs to none.
    """
    spec = spec_of_class(type(dm)) if dm is not None else None
    if spec is not None or ledger is None:
        return spec
    try:
        return spec_for(ledger=ledger)
    except KeyError as err:  # a ledger of a pipeline this version does not know
        log.debug("OrderValidator: %s", err)
        return None


def ledger_violations(
    dm: Any, ledger: StepLedger, configured: Pipeline = STANDARD_PIPELINE
) -> list[Violation]:
    """Every violation of ``dm``'s ledger, judged by its spec: the order and the spec's ledger checks.

    Args:
        dm: the datamodule.
        ledger: its ledger.
        configured: the pipeline the caller was given (``OrderValidator(pipeline=...)``).
    """
    pipeline = judged_pipeline(ledger_pipeline(dm, ledger, configured), ledger)
    spec = spec_of(dm, ledger) or spec_for()
    return spec.check(ledger, pipeline)


# -- the items behind its dataloaders ---------------------------------------------------------
#: The splits read, and the dataloader method of each.
SPLIT_LOADERS = {"train": "train_dataloader", "val": "val_dataloader"}
_LABEL_KEYS = frozenset({"label", "labels", "y", "target", "targets", "key_hash"})


def split_dataset(dm: Any, split: str) -> tuple[Any, Any]:
    """The map-style dataset behind a split's dataloader and its collate function, or ``(None, None)``."""
    try:
        loader = getattr(dm, SPLIT_LOADERS[split])()
    except Exception as err:  # no such split, or not set up: nothing to read
        log.debug("OrderValidator: no %s dataset (%s)", split, err)
        return None, None
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    dataset = getattr(loader, "dataset", None)
    if (
        dataset is None
        or isinstance(dataset, torch.utils.data.IterableDataset)
        or not hasattr(dataset, "__len__")
    ):
        return None, None
    return dataset, getattr(loader, "collate_fn", None) or torch.utils.data.default_collate


def train_loader(trainer: Any) -> torch.utils.data.DataLoader | None:
    """The train ``DataLoader`` Lightning will iterate (the first one of a collection), or ``None``."""
    loader = getattr(trainer, "train_dataloader", None)
    if isinstance(loader, dict):
        loader = next(iter(loader.values()), None)
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    return loader if isinstance(loader, torch.utils.data.DataLoader) else None


def leaves(item: Any, path: str = "") -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs of an item: dict keys sorted; in a tuple, the last element is the label."""
    if isinstance(item, Mapping):
        return [pair for key in sorted(item, key=str) for pair in leaves(item[key], f"{path}{key}")]
    if isinstance(item, (list, tuple)) and not path and len(item) >= 2:
        return [pair for i, x in enumerate(item[:-1]) for pair in leaves(x, f"{i}")] + [("label", item[-1])]
    return [(path or "0", item)]


def is_label(path: str) -> bool:
    """Whether a leaf's path names the label (or the key hash, which is no input either)."""
    return path.lower() in _LABEL_KEYS


def leaf_array(value: Any) -> np.ndarray | None:
    """A tensor or array leaf as a numpy array; ``None`` for anything else (text, numbers)."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    return None


# -- the dims a model was built for -----------------------------------------------------------
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


# -- a phase's evidence --------------------------------------------------------------------------
def phase_evidence(
    trainer: Any,
    phase: Phase,
    module: Any,
    state: ValidatorState,
    pipeline: Pipeline,
    settings: Mapping[str, Any],
    *,
    samples: Mapping[str, Any] | None = None,
    checkpoint: Mapping[str, Any] | None = None,
    step_one: Any = None,
) -> CheckEvidence:
    """What ``phase``'s checks read: this run's data as ``setup`` found it (``state``), and what is given.

    Args:
        trainer: the Trainer (its datamodule and world size).
        phase: the phase.
        module: the LightningModule, whose dims are read when a check of the phase reads them.
        state: what the validator knows of this run.
        pipeline: the pipeline the ledger is judged against.
        settings: the validator's settings.
        samples: sampled rows read for this phase (``setup``'s), added to what ``state`` holds.
        checkpoint: what a checkpoint being resumed holds, or ``None``.
        step_one: what the first training step showed, or ``None``.
    """
    dm = trainer.datamodule
    # The model's dims only where a check of the phase reads them (a walk over its modules).
    reads_model = any(EvidenceKind.MODEL in check.reads for check in registered_checks(phase))
    return CheckEvidence(
        phase=phase,
        world_size=max(1, int(trainer.world_size)),
        settings=dict(settings),
        datamodule=dm,
        ledger=datamodule_ledger(dm),
        pipeline=pipeline,
        fingerprints=dict(state.fingerprints),
        dims=dict(state.dims),
        samples={
            **(samples or {}),
            "observed": dict(state.observed),
            "tokenizer": state.tokenizer,
            "resume_sample": dict(state.content),
        },
        model=model_dims(module) if module is not None and reads_model else {},
        checkpoint=checkpoint,
        step_one=step_one,
    )


# -- the checks judged on these alone ------------------------------------------------------------
def _judge_order(evidence: CheckEvidence) -> list[Violation]:
    if evidence.ledger is None:
        return []
    # A hand-written datamodule (lightning_order.recording) is judged on the steps it declares.
    return ledger_violations(evidence.datamodule, evidence.ledger, evidence.pipeline or STANDARD_PIPELINE)


def _judge_model_dims(evidence: CheckEvidence) -> list[Violation]:
    return check_model_dims(
        dict(evidence.model), dict(evidence.dims), observed=evidence.samples.get("observed")
    )


register_check(
    "order",
    _judge_order,
    phase=Phase.SETUP,
    reads=[EvidenceKind.LEDGER],
    rules=(
        "missing-step",
        "out-of-order",
        "stale-input",
        "vocab-before-clean",
        "fit-before-split",
        "shard-before-normalize",
        "init-before-data",
        "cycle",
        "duplicate-step",
        "dedup-after-split",
        "pack-without-eos",
    ),
    order=10,
)
register_check(
    "model-dims",
    _judge_model_dims,
    phase=Phase.FIT_START,
    reads=[EvidenceKind.MODEL, EvidenceKind.LEDGER, EvidenceKind.SAMPLES],
    rules=("init-before-data",),
    order=10,
)

"""What a datamodule says about its own data: its ledger, data fingerprints, dims and key hashes.

Gathering only, over duck-typed objects (``OrderedDataModule``, ``OrderedLMDataModule``, a
hand-written datamodule that records its steps, or any other); the judgements are in
:mod:`lightning_order.checks`. Also which pipeline judges a datamodule's ledger, asked of
:mod:`lightning_order.pipelines` like everything else that must pick one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_order.checks.ledger import judged_pipeline
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.pipelines import PIPELINES, spec_for, spec_of_class
from lightning_order.recorder import recorded_fingerprints
from lightning_order.rules import Violation
from lightning_order.spec import PipelineSpec

__all__ = [
    "KEY_HASH",
    "data_dims",
    "data_fingerprints",
    "datamodule_ledger",
    "ledger_pipeline",
    "ledger_violations",
    "spec_of",
    "split_key_hashes",
]

log = logging.getLogger(__name__)

#: The column of an encoded split that holds the hash of each row's cleaned key.
KEY_HASH = "key_hash"


def datamodule_ledger(dm: Any) -> StepLedger | None:
    """``dm.ledger`` when it is a :class:`~lightning_order.ledger.StepLedger`, else ``None``."""
    ledger = getattr(dm, "ledger", None) if dm is not None else None
    return ledger if isinstance(ledger, StepLedger) else None


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


def ledger_pipeline(dm: Any, ledger: StepLedger | None, configured: Pipeline = STANDARD_PIPELINE) -> Pipeline:
    """The pipeline that judges ``dm``'s ledger.

    A pipeline the user configured (anything but the default) is kept. Otherwise a user's own
    :class:`~lightning_order.order.Pipeline` on the datamodule (``dm.pipeline``) judges its
    ledger; for ours, :func:`~lightning_order.pipelines.spec_for` decides: the datamodule's
    own ``pipeline``, else the name the ledger records (``info["pipeline"]``), else the default.

    Args:
        dm: the datamodule (or ``None``).
        ledger: its ledger (or ``None``).
        configured: the pipeline the caller was given (``OrderValidator(pipeline=...)``).
    """
    if configured is not STANDARD_PIPELINE:
        return configured
    own = getattr(dm, "pipeline", None) if dm is not None else None
    own = own if isinstance(own, Pipeline) else None
    if own is not None and all(own is not d.pipeline for d in PIPELINES.values()):
        return own  # declared by the datamodule, not one of ours: judged as declared
    try:
        return spec_for(pipeline=own, ledger=ledger).pipeline
    except KeyError as err:  # a ledger of a pipeline this version does not know
        log.debug("OrderValidator: %s; judging on the configured pipeline", err)
        return configured


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

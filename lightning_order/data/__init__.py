"""The data side of lightning_order: :class:`OrderedDataModule` and its steps as plain functions.

:mod:`~.steps` is the machinery (the step registry, the executability check, the one runner and
its dry run). Each step is registered in the module that owns its maths: :mod:`~.load` (with
:mod:`~.demo`, the demo corpus), :mod:`~.cleaning`, :mod:`~.features` (engineered features and
the streaming statistics), :mod:`~.split`, :mod:`~.vocab`, :mod:`~.encode`, :mod:`~.shard`.
:mod:`~.arrow` holds the vectorised row-wise kernels, :mod:`~.tables` the Arrow batches in and
out of the steps. :mod:`~.config` holds the typed, validated arguments; :mod:`~.cache` the folder
naming, file lock and atomic publish; :mod:`~.loaders` the batch collation; :mod:`~.datamodule`
the thin shell; :mod:`~.prepare` the preparation itself, which the light ``prepare`` command runs
without Lightning. Causal language modelling has its own steps on the same runner:
:mod:`~.lm_steps` (with :mod:`~.lm_corpus`, :mod:`~.dedup`, :mod:`~.lm_config`, :mod:`~.lm_cache`)
and the shell :mod:`~.lm_datamodule` (``OrderedLMDataModule``).

The names below are imported on first use, so importing a step module does not import torch or
Lightning.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "DATA_STEPS": "lightning_order.data.datamodule",
    "OrderedDataModule": "lightning_order.data.datamodule",
    "clean_text": "lightning_order.data.cleaning",
    "make_demo_corpus": "lightning_order.data.demo",
    "fit_statistics": "lightning_order.data.features",
    "shard_bounds": "lightning_order.data.shard",
}

__all__ = [
    "DATA_STEPS",
    "OrderedDataModule",
    "clean_text",
    "fit_statistics",
    "make_demo_corpus",
    "shard_bounds",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_order.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.data.cleaning import clean_text
    from lightning_order.data.datamodule import DATA_STEPS, OrderedDataModule
    from lightning_order.data.demo import make_demo_corpus
    from lightning_order.data.features import fit_statistics
    from lightning_order.data.shard import shard_bounds

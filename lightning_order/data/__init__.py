"""The data side of lightning_order: :class:`OrderedDataModule` and its steps as plain functions.

:mod:`~.steps` is the machinery (the step registry, the executability check, the one runner and
its dry run). Each step is registered in the module that owns its maths: :mod:`~.load` (with
:mod:`~.demo`, the demo corpus), :mod:`~.cleaning`, :mod:`~.features` (engineered features and
the streaming statistics), :mod:`~.split`, :mod:`~.vocab`, :mod:`~.encode`, :mod:`~.shard`.
:mod:`~.config` holds the typed, validated arguments; :mod:`~.cache` the folder naming, file lock
and atomic publish; :mod:`~.loaders` the batch collation; :mod:`~.datamodule` the thin shell.
Causal language modelling has its own steps on the same runner: :mod:`~.lm_steps` (with
:mod:`~.lm_corpus`, :mod:`~.dedup`, :mod:`~.lm_config`, :mod:`~.lm_cache`) and the shell
:mod:`~.lm_datamodule` (``OrderedLMDataModule``).
"""

from lightning_order.data.cleaning import clean_text
from lightning_order.data.datamodule import DATA_STEPS, OrderedDataModule
from lightning_order.data.demo import make_demo_corpus
from lightning_order.data.features import fit_statistics
from lightning_order.data.shard import shard_bounds

__all__ = [
    "DATA_STEPS",
    "OrderedDataModule",
    "clean_text",
    "fit_statistics",
    "make_demo_corpus",
    "shard_bounds",
]

"""The data side of lightning_order: a shared engine and one package per pipeline.

* :mod:`~.engine`: what every pipeline shares (step registry and runner, cache, storage,
  inputs, keys, loaders, the base config and the base DataModule).
* :mod:`~.text`: text classification, :class:`~lightning_order.OrderedDataModule`.
* :mod:`~.lm`: causal language modelling, :class:`~lightning_order.OrderedLMDataModule`.

A new pipeline is a module or package of its own (``examples/toy_regression.py``) and a spec
admitted by :func:`lightning_order.register`.
The names below are imported on first use, so importing a step module does not import torch or
Lightning.
"""

from __future__ import annotations

from lightning_order.lazy import lazy_exports

_LAZY: dict[str, str] = {
    "DATA_STEPS": "lightning_order.data.text.steps",
    "OrderedDataModule": "lightning_order.data.text.datamodule",
    "OrderedLMDataModule": "lightning_order.data.lm.datamodule",
    "clean_text": "lightning_order.data.text.normalise",
    "make_demo_corpus": "lightning_order.data.text.demo",
    "fit_statistics": "lightning_order.data.text.features",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

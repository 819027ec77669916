"""lightning_order: the right order of data preparation for PyTorch Lightning, by default and proven.

The public API lives here and only here; import from ``lightning_order``.

Names are imported on first use (:data:`_LAZY`, PEP 562 ``__getattr__``), so ``import
lightning_order`` and the light commands (``lightning-order --help``, ``audit``, ``graph``) do not
import torch or Lightning; ``from lightning_order import OrderValidator`` imports what that name
needs, as before. A new public name is one line in :data:`_LAZY` (``__all__`` is its keys).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from lightning_order.lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    "OrderValidator": "lightning_order.callbacks",
    "SymptomMonitor": "lightning_order.callbacks",
    "Diagnosis": "lightning_order.checks.symptoms",
    "OrderedDataModule": "lightning_order.data.text.datamodule",
    "make_demo_corpus": "lightning_order.data.text.demo",
    "OrderedLMDataModule": "lightning_order.data.lm.datamodule",
    "CacheWarning": "lightning_order.errors",
    "CheckpointError": "lightning_order.errors",
    "DataError": "lightning_order.errors",
    "FingerprintError": "lightning_order.errors",
    "LightningOrderError": "lightning_order.errors",
    "ManifestError": "lightning_order.errors",
    "OrderError": "lightning_order.errors",
    "OrderWarning": "lightning_order.errors",
    "StepNameError": "lightning_order.errors",
    "StepLedger": "lightning_order.ledger",
    "StepRecord": "lightning_order.ledger",
    "fingerprint": "lightning_order.ledger",
    "step_fingerprint": "lightning_order.ledger",
    "OrderedTextClassifier": "lightning_order.models.classifier",
    "OrderedCausalLM": "lightning_order.models.causal_lm",
    "LM_PIPELINE": "lightning_order.order",
    "STANDARD_PIPELINE": "lightning_order.order",
    "Pipeline": "lightning_order.order",
    "Step": "lightning_order.order",
    "require_steps": "lightning_order.order",
    "StepRecording": "lightning_order.recording",
    "data_fingerprint": "lightning_order.fingerprints",
    "record_step": "lightning_order.recording",
    "recording": "lightning_order.recording",
    "RecoveryPlan": "lightning_order.recovery",
    "recover": "lightning_order.recovery",
    "RULES": "lightning_order.rules",
    "Violation": "lightning_order.rules",
}

#: The public names: the keys of :data:`_LAZY`, written once.
__all__ = sorted(_LAZY)


class _Package(types.ModuleType):
    """The package module: a submodule named like a public name (``recording``) never hides it.

    The import system sets ``lightning_order.recording`` to the submodule once it is imported;
    the eager ``__init__`` then rebound it to the function, and this keeps that so.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if _LAZY.get(name) == f"{__name__}.{name}" and isinstance(value, types.ModuleType):
            self.__dict__.pop(name, None)  # the public object is resolved by __getattr__
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

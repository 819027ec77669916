"""lightning_order: the right order of data preparation for PyTorch Lightning, by default and proven.

The public API lives here and only here; import from ``lightning_order``.

Names are imported on first use (:data:`_LAZY`, PEP 562 ``__getattr__``), so ``import
lightning_order`` and the light commands (``lightning-order --help``, ``audit``, ``graph``) do not
import torch or Lightning; ``from lightning_order import OrderValidator`` imports what that name
needs, as before. A new public name is one line in :data:`_LAZY` (``__all__`` is its keys) and
its import under ``TYPE_CHECKING`` (what type checkers and editors read; ``py.typed`` ships).
Every other module is internal: its names may change without notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_order.lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_LAZY: dict[str, str] = {
    "OrderValidator": "lightning_order.callbacks",
    "SymptomMonitor": "lightning_order.callbacks",
    "OrderGuard": "lightning_order.guard",
    "Diagnosis": "lightning_order.checks.symptoms",
    "OrderedDataModule": "lightning_order.data.text.datamodule",
    "make_demo_corpus": "lightning_order.data.text.demo",
    "OrderedLMDataModule": "lightning_order.data.lm.datamodule",
    "LMSource": "lightning_order.data.lm.mixture",
    # The extension surface: what a pipeline of your own is written with (examples/toy_regression.py).
    "BaseDataConfig": "lightning_order.data.engine.config",
    "OrderedDataModuleBase": "lightning_order.data.engine.datamodule",
    "PipelinePreparation": "lightning_order.data.engine.preparation",
    "config_cache_key": "lightning_order.data.engine.preparation",
    "write_manifest": "lightning_order.data.engine.preparation",
    "StepRegistry": "lightning_order.data.engine.registry",
    "StepSpec": "lightning_order.data.engine.registry",
    "DataState": "lightning_order.data.engine.runner",
    "StepContext": "lightning_order.data.engine.runner",
    "StepResult": "lightning_order.data.engine.runner",
    "train_data": "lightning_order.data.engine.runner",
    "CacheWarning": "lightning_order.errors",
    "CheckpointError": "lightning_order.errors",
    "DataError": "lightning_order.errors",
    "FingerprintError": "lightning_order.errors",
    "LightningOrderError": "lightning_order.errors",
    "ManifestError": "lightning_order.errors",
    "NotFiniteError": "lightning_order.errors",
    "OrderError": "lightning_order.errors",
    "OrderWarning": "lightning_order.errors",
    "OutputError": "lightning_order.errors",
    "OutputWarning": "lightning_order.errors",
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
    "register": "lightning_order.pipelines",
    "unregister": "lightning_order.pipelines",
    "PipelineSpec": "lightning_order.spec",
    "Preparation": "lightning_order.spec",
    "StepRecording": "lightning_order.recorder",
    "data_fingerprint": "lightning_order.fingerprints",
    "record_step": "lightning_order.recorder",
    "recording": "lightning_order.recorder",
    "require_steps": "lightning_order.recorder",
    "RecoveryPlan": "lightning_order.recovery",
    "recover": "lightning_order.recovery",
    "RULES": "lightning_order.rules",
    "Rule": "lightning_order.rules",
    "Violation": "lightning_order.rules",
    "CheckEvidence": "lightning_order.checks.registry",
    "register_check": "lightning_order.checks.registry",
    "unregister_check": "lightning_order.checks.registry",
}

#: The public names: the keys of :data:`_LAZY`, written once.
__all__ = sorted(_LAZY)


if TYPE_CHECKING:
    # What type checkers and editors read: each name of _LAZY from its module (a test keeps the two equal).
    from lightning_order.callbacks import OrderValidator as OrderValidator
    from lightning_order.callbacks import SymptomMonitor as SymptomMonitor
    from lightning_order.checks.registry import CheckEvidence as CheckEvidence
    from lightning_order.checks.registry import register_check as register_check
    from lightning_order.checks.registry import unregister_check as unregister_check
    from lightning_order.checks.symptoms import Diagnosis as Diagnosis
    from lightning_order.data.engine.config import BaseDataConfig as BaseDataConfig
    from lightning_order.data.engine.datamodule import OrderedDataModuleBase as OrderedDataModuleBase
    from lightning_order.data.engine.preparation import PipelinePreparation as PipelinePreparation
    from lightning_order.data.engine.preparation import config_cache_key as config_cache_key
    from lightning_order.data.engine.preparation import write_manifest as write_manifest
    from lightning_order.data.engine.registry import StepRegistry as StepRegistry
    from lightning_order.data.engine.registry import StepSpec as StepSpec
    from lightning_order.data.engine.runner import DataState as DataState
    from lightning_order.data.engine.runner import StepContext as StepContext
    from lightning_order.data.engine.runner import StepResult as StepResult
    from lightning_order.data.engine.runner import train_data as train_data
    from lightning_order.data.lm.datamodule import OrderedLMDataModule as OrderedLMDataModule
    from lightning_order.data.lm.mixture import LMSource as LMSource
    from lightning_order.data.text.datamodule import OrderedDataModule as OrderedDataModule
    from lightning_order.data.text.demo import make_demo_corpus as make_demo_corpus
    from lightning_order.errors import CacheWarning as CacheWarning
    from lightning_order.errors import CheckpointError as CheckpointError
    from lightning_order.errors import DataError as DataError
    from lightning_order.errors import FingerprintError as FingerprintError
    from lightning_order.errors import LightningOrderError as LightningOrderError
    from lightning_order.errors import ManifestError as ManifestError
    from lightning_order.errors import NotFiniteError as NotFiniteError
    from lightning_order.errors import OrderError as OrderError
    from lightning_order.errors import OrderWarning as OrderWarning
    from lightning_order.errors import OutputError as OutputError
    from lightning_order.errors import OutputWarning as OutputWarning
    from lightning_order.errors import StepNameError as StepNameError
    from lightning_order.fingerprints import data_fingerprint as data_fingerprint
    from lightning_order.guard import OrderGuard as OrderGuard
    from lightning_order.ledger import StepLedger as StepLedger
    from lightning_order.ledger import StepRecord as StepRecord
    from lightning_order.ledger import fingerprint as fingerprint
    from lightning_order.ledger import step_fingerprint as step_fingerprint
    from lightning_order.models.causal_lm import OrderedCausalLM as OrderedCausalLM
    from lightning_order.models.classifier import OrderedTextClassifier as OrderedTextClassifier
    from lightning_order.order import LM_PIPELINE as LM_PIPELINE
    from lightning_order.order import STANDARD_PIPELINE as STANDARD_PIPELINE
    from lightning_order.order import Pipeline as Pipeline
    from lightning_order.order import Step as Step
    from lightning_order.pipelines import register as register
    from lightning_order.pipelines import unregister as unregister
    from lightning_order.recorder import StepRecording as StepRecording
    from lightning_order.recorder import record_step as record_step
    from lightning_order.recorder import recording as recording
    from lightning_order.recorder import require_steps as require_steps
    from lightning_order.recovery import RecoveryPlan as RecoveryPlan
    from lightning_order.recovery import recover as recover
    from lightning_order.rules import RULES as RULES
    from lightning_order.rules import Rule as Rule
    from lightning_order.rules import Violation as Violation
    from lightning_order.spec import PipelineSpec as PipelineSpec
    from lightning_order.spec import Preparation as Preparation
else:
    # At run time each name is imported on first use; hidden from type checkers, which would
    # otherwise type every misspelt attribute of the package as Any.
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

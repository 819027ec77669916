"""lightning_order: the right order of data preparation for PyTorch Lightning, by default and proven.

The public API lives here and only here; import from ``lightning_order``.
"""

from lightning_order.callbacks import OrderValidator, SymptomMonitor
from lightning_order.checks.symptoms import Diagnosis
from lightning_order.data import OrderedDataModule, make_demo_corpus
from lightning_order.data.lm_datamodule import OrderedLMDataModule
from lightning_order.errors import (
    CacheWarning,
    CheckpointError,
    DataError,
    LightningOrderError,
    ManifestError,
    OrderError,
    OrderWarning,
    StepNameError,
)
from lightning_order.ledger import StepLedger, StepRecord, fingerprint, step_fingerprint
from lightning_order.lm_model import OrderedCausalLM
from lightning_order.models import OrderedTextClassifier
from lightning_order.order import LM_PIPELINE, STANDARD_PIPELINE, Pipeline, Step, require_steps
from lightning_order.recording import StepRecording, data_fingerprint, record_step, recording
from lightning_order.recovery import RecoveryPlan, recover
from lightning_order.rules import RULES, Violation

__version__ = "0.1.0"

__all__ = [
    "RULES",
    "STANDARD_PIPELINE",
    "CacheWarning",
    "CheckpointError",
    "DataError",
    "Diagnosis",
    "LightningOrderError",
    "ManifestError",
    "OrderError",
    "OrderValidator",
    "OrderWarning",
    "OrderedDataModule",
    "OrderedTextClassifier",
    "Pipeline",
    "RecoveryPlan",
    "Step",
    "StepLedger",
    "StepNameError",
    "StepRecord",
    "StepRecording",
    "SymptomMonitor",
    "Violation",
    "data_fingerprint",
    "fingerprint",
    "make_demo_corpus",
    "record_step",
    "recording",
    "recover",
    "require_steps",
    "step_fingerprint",
    "LM_PIPELINE",
    "OrderedLMDataModule",
    "OrderedCausalLM",
]

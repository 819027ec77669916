"""lightning_order: the right order of data preparation for PyTorch Lightning, by default and proven.

The public API lives here and only here; import from ``lightning_order``.
"""

from lightning_order.errors import DataError, LightningOrderError, ManifestError, OrderError, OrderWarning
from lightning_order.ledger import StepLedger, StepRecord, fingerprint, step_fingerprint
from lightning_order.order import RULES, STANDARD_PIPELINE, Pipeline, Step, Violation, require_steps

# -- data (OrderedDataModule) --
# -- callbacks (OrderValidator, SymptomMonitor) --
# -- models and recovery --

__version__ = "0.1.0"

__all__ = [
    "RULES",
    "STANDARD_PIPELINE",
    "DataError",
    "LightningOrderError",
    "ManifestError",
    "OrderError",
    "OrderWarning",
    "Pipeline",
    "Step",
    "StepLedger",
    "StepRecord",
    "Violation",
    "fingerprint",
    "require_steps",
    "step_fingerprint",
]

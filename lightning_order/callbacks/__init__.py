"""Lightning callbacks: they gather data from the Trainer, call the pure checks, and act.

Each callback is a package with its helpers: :mod:`~lightning_order.callbacks.validator`
(``OrderValidator``, which proves the order before step 1) and
:mod:`~lightning_order.callbacks.monitor` (``SymptomMonitor``, which reads the symptoms of an order
error during training).
"""

from typing import TYPE_CHECKING

from lightning_order.lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_order.callbacks.monitor import SymptomMonitor
    from lightning_order.callbacks.validator import OrderValidator

__all__ = ["OrderValidator", "SymptomMonitor"]

# Lazy (PEP 562): the validator's core (its check modules) imports without Lightning, for the
# loops that are not Lightning's (OrderGuard, the Hugging Face Trainer's OrderCallback).
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "OrderValidator": "lightning_order.callbacks.validator.callback",
        "SymptomMonitor": "lightning_order.callbacks.monitor",
    },
)

"""Lightning callbacks: they gather data from the Trainer, call the pure checks, and act.

Each callback is a package with its helpers: :mod:`~lightning_order.callbacks.validator`
(``OrderValidator``, which proves the order before step 1) and
:mod:`~lightning_order.callbacks.monitor` (``SymptomMonitor``, which reads the symptoms of an order
error during training).
"""

from lightning_order.callbacks.monitor import SymptomMonitor
from lightning_order.callbacks.validator import OrderValidator

__all__ = ["OrderValidator", "SymptomMonitor"]

"""Lightning callbacks: they gather data from the Trainer, call the pure checks, and act."""

from lightning_order.callbacks.order_validator import OrderValidator
from lightning_order.callbacks.symptom_monitor import SymptomMonitor

__all__ = ["OrderValidator", "SymptomMonitor"]

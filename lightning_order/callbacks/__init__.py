"""Lightning callbacks: they gather data from the Trainer, call the pure checks, and act."""

# OrderValidator (order_validator.py) and SymptomMonitor (symptom_monitor.py) export here.
__all__: list[str] = []

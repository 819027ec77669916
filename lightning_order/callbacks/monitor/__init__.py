"""``SymptomMonitor`` and what it reads, one concept per module.

The callback (:mod:`.callback`) reads cheap signals during training and names the order error
behind a symptom; its helpers: the readings kept on the device until a check (:mod:`.readings`),
per-batch waits and step times (:mod:`.step_clock`), which detector judges which readings
(:mod:`.detection`) and the run's facts for attribution (:mod:`.facts`).
"""

from lightning_order.callbacks.monitor.callback import SymptomMonitor

__all__ = ["SymptomMonitor"]

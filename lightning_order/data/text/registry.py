"""The registry of the text-classification steps (:class:`~lightning_order.OrderedDataModule`).

Each step registers itself in the module that owns its maths (:mod:`.load`, :mod:`.cleaning`,
:mod:`.features`, :mod:`.split`, :mod:`.vocab`, :mod:`.encode`, :mod:`.shard`); :mod:`.steps`
imports them all, so importing :data:`lightning_order.data.text.steps.STEPS` gives the complete
registry. A step of your own registers here too (see :mod:`lightning_order.data.engine.runner`).
"""

from __future__ import annotations

from lightning_order.data.engine.runner import StepRegistry
from lightning_order.order import STANDARD_PIPELINE

__all__ = ["STEPS"]

#: The text-classification steps, by pipeline step name.
STEPS = StepRegistry(STANDARD_PIPELINE)

"""The complete registry of the text-classification steps, in the mandated order.

Importing this module imports every step module (each registers its step in
:data:`~.registry.STEPS`); :data:`DATA_STEPS` lists them in the order of
:data:`~lightning_order.STANDARD_PIPELINE`.
"""

from __future__ import annotations

import lightning_order.data.text.cleaning
import lightning_order.data.text.encode
import lightning_order.data.text.features
import lightning_order.data.text.load
import lightning_order.data.text.shard
import lightning_order.data.text.split
import lightning_order.data.text.vocab  # noqa: F401  (the steps register themselves)
from lightning_order.data.text.registry import STEPS

__all__ = ["DATA_STEPS", "STEPS"]

#: The data steps of :data:`~lightning_order.STANDARD_PIPELINE`, in the mandated order.
DATA_STEPS: tuple[str, ...] = STEPS.data_steps()

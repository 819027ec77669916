"""The registry of the text-classification steps (:class:`~lightning_order.OrderedDataModule`) and the state they pass on.

Each step registers itself in the module that owns its maths (:mod:`.load`, :mod:`.cleaning`,
:mod:`.features`, :mod:`.split`, :mod:`.vocab`, :mod:`.encode`, :mod:`.shard`); :mod:`.steps`
imports them all, so importing :data:`lightning_order.data.text.steps.STEPS` gives the complete
registry. A step of your own registers here too (see :mod:`lightning_order.data.engine.runner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_order.data.engine.runner import DataState, StepRegistry
from lightning_order.order import STANDARD_PIPELINE

__all__ = ["STEPS", "TextState"]


@dataclass(frozen=True)
class TextState(DataState):
    """What the text-classification steps pass on: :class:`~lightning_order.DataState`, and what
    ``split`` and ``fit_features`` learn.

    Attributes:
        statistics: the fitted feature statistics (``None`` until fitted).
        standardised: whether ``encode`` applied ``statistics`` to the stored features.
        label_names: the class labels, in class-id order.
    """

    statistics: Mapping[str, Any] | None = None
    standardised: bool = False
    label_names: tuple[Any, ...] = ()


#: The text-classification steps, by pipeline step name; each run starts from an empty TextState.
STEPS = StepRegistry(STANDARD_PIPELINE, state=TextState)

"""The registry of the LM steps and what every LM step shares (its engine, its scratch folders, its parts).

Each step registers itself in a module of its own (:mod:`.load`, :mod:`.cleaning`,
:mod:`.deduplication`, :mod:`.split`, :mod:`.vocab`, :mod:`.encode`, :mod:`.pack`, :mod:`.shard`);
:mod:`.steps` imports them all, so importing
:data:`lightning_order.data.lm.steps.LM_STEPS` gives the complete registry.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lightning_order.data.engine.runner import DataState, StepContext, StepRegistry
from lightning_order.errors import DataError
from lightning_order.order import LM_PIPELINE

__all__ = ["LM_CODE_PARTS", "LM_STEPS", "NGRAM", "NUM_PERM", "engine_of", "parts_of", "scratch"]

#: The registry of the LM steps (:class:`~lightning_order.OrderedLMDataModule`).
LM_STEPS = StepRegistry(LM_PIPELINE)
#: Word n-grams and MinHash permutations of the near-duplicate rule (recorded by ``dedup``): 256
#: permutations band as 32 bands of 8 rows, which finds a pair at the 0.8 threshold with
#: probability 0.997 while a pair at Jaccard 0.3 becomes a candidate with probability 0.002 (128
#: permutations as 32 bands of 4: 0.23), so few candidates need the exact comparison.
NGRAM, NUM_PERM = 5, 256
#: The part a document id names (:func:`~.clusters.doc_ids`): the whole corpus, or a side of the split.
LM_CODE_PARTS = {"all": 0, "train": 1, "val": 2}


def engine_of(ctx: StepContext) -> Any:
    if ctx.engine is None:  # a step run on its own (tests): this process
        from lightning_order.data.engine.engines import LocalEngine

        return LocalEngine(1)
    return ctx.engine


def scratch(ctx: StepContext, *names: str) -> Path:
    if ctx.work is None:
        raise DataError("the LM steps write their partitions to a scratch folder; none was given", step=None)
    path = ctx.work.joinpath(*names)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def parts_of(state: DataState) -> dict[str, Any]:
    """What the step runs on: each part after the split, else the whole data."""
    return dict(state.parts) if state.parts else {"all": state.data}

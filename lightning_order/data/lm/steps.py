"""The complete registry of the causal language-modelling steps, in the mandated order.

``load → clean → dedup → split → build_vocab → encode → pack`` run in ``prepare_data``, ``shard``
in ``setup`` on every rank (docs/lm.md; docs/scale.md). No step holds the corpus in memory: documents
rest in Arrow files (:class:`~lightning_order.data.engine.partitions.DocumentSet`), each step
hands per-partition work items (:mod:`.tasks`) to the engine (``ctx.engine``) and combines the
small results in partition order. Memory is bounded by a partition, the tokenizer trainer's word
counts and the deduplication's candidate pairs, not by the corpus.

Each step is registered in a module of its own, as in :mod:`lightning_order.data.text`:
:mod:`.load`, :mod:`.cleaning` (``clean``), :mod:`.deduplication` (``dedup``, on the rule of
:mod:`.clusters` and the shingles of :mod:`.shingles`), :mod:`.split`, :mod:`.vocab`
(``build_vocab``), :mod:`.encode`, :mod:`.pack` (on the token streams of :mod:`.blocks`) and
:mod:`.shard`. A step out of the mandated order
(``enforce=False``, for experiments) runs on whatever form the data has then: before ``clean``
the input chunks are keyed and partitioned as they are; after the split, each part on its own
(``dedup`` then counts the pairs straddling the split).
"""

from __future__ import annotations

import lightning_order.data.lm.cleaning
import lightning_order.data.lm.deduplication
import lightning_order.data.lm.encode
import lightning_order.data.lm.load
import lightning_order.data.lm.pack
import lightning_order.data.lm.shard
import lightning_order.data.lm.split
import lightning_order.data.lm.vocab  # noqa: F401  (the steps register themselves)
from lightning_order.data.lm.documents import clean_document
from lightning_order.data.lm.registry import LM_STEPS

__all__ = ["LM_DATA_STEPS", "LM_STEPS", "clean_document"]

#: The data steps of :data:`~lightning_order.LM_PIPELINE`, in the mandated order (defined here only).
LM_DATA_STEPS: tuple[str, ...] = LM_STEPS.data_steps()

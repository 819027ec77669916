"""The ``dedup`` step: exact and near-duplicates removed from the whole corpus, across partitions.

Per partition (:func:`~.tasks.dedup_bands`): exact duplicates (adjacent in the canonical order),
then MinHash band keys of the kept documents routed to buckets; per bucket
(:func:`~.tasks.group_bucket`): candidate pairs; in chunks (:func:`~.tasks.confirm_pairs`): each
pair's exact Jaccard; here: clusters, each keeping its smallest key (:mod:`.clusters`). The
result is a keep mask per partition file: the text is never written again.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any

import numpy as np

from lightning_order.data.engine.partitions import DocumentSet
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.engine.storage import save_array
from lightning_order.data.lm import tasks
from lightning_order.data.lm.cleaning import partitioned
from lightning_order.data.lm.clusters import clusters_removed, split_doc_ids
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import (
    LM_CODE_PARTS,
    LM_STEPS,
    NGRAM,
    NUM_PERM,
    engine_of,
    parts_of,
    scratch,
)
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["PAIRS_PER_TASK", "dedup"]

#: Candidate pairs confirmed by one work item at most (its documents' n-grams are what it holds).
PAIRS_PER_TASK = 20_000


@LM_STEPS.register("dedup", takes=ROWS, reads="data", writes_data=True)
def dedup(ctx: StepContext, state: DataState) -> StepResult:
    """Removes exact and near-duplicates (``dedup_threshold``) from the whole corpus, across partitions.

    Run after the split (a wrong order, ``enforce=False``), each part loses its own duplicates
    only, and the confirmed pairs across the split are counted (``straddling``).
    """
    cfg: LMConfig = ctx.config
    engine = engine_of(ctx)
    count = int(state.extra["partitions"])
    parts = {name: partitioned(ctx, docs, name, count) for name, docs in parts_of(state).items()}
    folder = scratch(ctx, "dedup")
    buckets = max(count, 8)
    params = {"threshold": cfg.dedup_threshold, "ngram": NGRAM, "num_perm": NUM_PERM}
    first = {
        name: engine.map(
            tasks.dedup_bands,
            [
                {
                    "documents": docs,
                    "partition": p,
                    "part": LM_CODE_PARTS[name],
                    "masks": folder / "masks",
                    "bands": folder / "bands",
                    "buckets": buckets,
                    "threshold": cfg.dedup_threshold,
                    "ngram": NGRAM,
                    "num_perm": NUM_PERM,
                    "seed": cfg.seed,
                }
                for p in range(docs.count)
            ],
            weight=docs.text_bytes,
            desc=f"dedup {name}",
        )
        for name, docs in parts.items()
    }
    grouped = engine.map(
        tasks.group_bucket,
        [{"folder": folder / "bands" / f"b{b:05d}"} for b in range(buckets)],
        desc="dedup groups",
    )
    candidates = np.unique(np.concatenate([*grouped, np.empty((0, 2), dtype=np.int64)]), axis=0)
    by_index = {LM_CODE_PARTS[name]: docs for name, docs in parts.items()}
    confirmed, keys = _confirm(engine, candidates, by_index, cfg.dedup_threshold)
    pairs, pair_keys = candidates[confirmed], keys[confirmed]
    same_part = split_doc_ids(pairs[:, 0])[0] == split_doc_ids(pairs[:, 1])[0]
    removed, clusters = clusters_removed(pairs[same_part], pair_keys[same_part])
    shutil.rmtree(folder / "bands", ignore_errors=True)
    kept_parts, exact_removed = {}, 0
    for name, docs in parts.items():
        masks, rows, size = [], 0, 0
        for p, result in enumerate(first[name]):
            keep = np.load(result["mask"])
            exact_removed += result["exact_removed"]
            mine = removed[
                (split_doc_ids(removed)[0] == LM_CODE_PARTS[name]) & (split_doc_ids(removed)[1] == p)
            ]
            keep[split_doc_ids(mine)[2]] = False
            save_array(result["mask"], keep)
            masks.append(result["mask"])
            rows += int(keep.sum())
        size = _kept_bytes(docs, masks)
        kept_parts[name] = docs.with_masks(masks, rows, size)
    stats: dict[str, Any] = {
        "exact_removed": exact_removed,
        "near_removed": len(removed),
        "clusters": clusters,
        "candidate_pairs": len(candidates),
        "rows": sum(len(d) for d in kept_parts.values()),
        "short_documents": sum(r["short"] for results in first.values() for r in results),
    }
    removed_set = set(removed.tolist())
    fp = fingerprint("lm-dedup", LM_CODE_VERSION, dict(ctx.inputs), params, sorted(removed_set))
    if not state.parts:
        if stats["rows"] == 0:
            raise DataError("no document is left after deduplication", step="dedup")
        return StepResult(replace(state, data=kept_parts["all"]), fp, params=params, stats=stats)
    across = pairs[~same_part]
    stats["straddling"] = int(sum(a not in removed_set and b not in removed_set for a, b in across.tolist()))
    part_fps = {name: fingerprint(fp, name) for name in kept_parts}
    return StepResult(
        replace(state, parts=kept_parts, part_fps=part_fps), fp, parts=part_fps, params=params, stats=stats
    )


def _confirm(engine: Any, candidates: np.ndarray, parts: dict[int, DocumentSet], threshold: float) -> tuple:
    if not len(candidates):
        return np.zeros(0, dtype=bool), np.zeros((0, 2, 2), dtype=np.uint64)
    count = max(min(len(candidates) // 2000 + 1, 4 * engine.workers), -(-len(candidates) // PAIRS_PER_TASK))
    chunks = np.array_split(candidates, count)
    items = [{"pairs": c, "parts": parts, "threshold": threshold, "ngram": NGRAM} for c in chunks if len(c)]
    results = engine.map(tasks.confirm_pairs, items, desc="dedup pairs")
    return (
        np.concatenate([r["confirmed"] for r in results]),
        np.concatenate([r["keys"] for r in results]),
    )


def _kept_bytes(docs: DocumentSet, masks: list[str]) -> int:
    import pyarrow.compute as pc

    from lightning_order.data.engine.partitions import read_table

    total = 0
    for p, mask in enumerate(masks):
        path = docs.path(p)
        if path.exists():
            lengths = pc.binary_length(read_table(path, ["text"]).column("text")).to_numpy(
                zero_copy_only=False
            )
            total += int(lengths[np.load(mask)].sum())
    return total

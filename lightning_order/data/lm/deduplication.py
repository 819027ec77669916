"""The ``dedup`` step: exact and near-duplicates removed from the whole corpus, across partitions.

Per partition (:func:`~.tasks.dedup_bands`): exact duplicates (adjacent in the canonical order),
then MinHash band keys of the kept documents routed to buckets; then the grouping, on the workers
(:mod:`.grouping`): candidate pairs per bucket, each confirmed by its exact Jaccard, connected
into clusters in rounds sharded by document (:mod:`.components`), each cluster keeping its
smallest key (:mod:`.clusters`' rule), remove lists per shard and partition. The driver holds file names and counts, never a pair or a document. The
result is a keep mask per partition file: the text is never written again.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightning_order.data.engine.partitions import DocumentSet
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.lm import components, grouping, tasks
from lightning_order.data.lm.cleaning import partitioned
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

#: Candidate pairs confirmed at once by a task (their documents' n-grams are what it holds).
PAIRS_PER_TASK = 20_000


@LM_STEPS.register("dedup", takes=ROWS, reads="data", writes_data=True, config=("dedup_threshold", "seed"))
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
                tasks.DedupItem(
                    documents=docs,
                    partition=p,
                    part=LM_CODE_PARTS[name],
                    masks=folder / "masks",
                    bands=folder / "bands",
                    buckets=buckets,
                    threshold=cfg.dedup_threshold,
                    ngram=NGRAM,
                    num_perm=NUM_PERM,
                    seed=cfg.seed,
                )
                for p in range(docs.count)
            ],
            weight=docs.text_bytes,
            desc=f"dedup {name}",
        )
        for name, docs in parts.items()
    }
    by_index = {LM_CODE_PARTS[name]: docs for name, docs in parts.items()}
    grouped = _grouped(engine, folder, buckets, by_index, cfg.dedup_threshold)
    shutil.rmtree(folder / "bands", ignore_errors=True)
    kept_parts, exact_removed = {}, 0
    for name, docs in parts.items():
        part = LM_CODE_PARTS[name]
        applied = engine.map(
            grouping.apply_removals,
            [
                {
                    "documents": docs,
                    "partition": p,
                    "mask": result["mask"],
                    "part": part,
                    "removed": folder / "removed",
                }
                for p, result in enumerate(first[name])
            ],
            weight=docs.text_bytes,
            desc=f"dedup masks {name}",
        )
        exact_removed += sum(result["exact_removed"] for result in first[name])
        masks = [result["mask"] for result in first[name]]
        rows, size = sum(a["rows"] for a in applied), sum(a["text_bytes"] for a in applied)
        kept_parts[name] = docs.with_masks(masks, rows, size)
    for done in ("removed", "components", "keys", "candidates", "keepers", "across", "across-left"):
        shutil.rmtree(folder / done, ignore_errors=True)
    stats: dict[str, Any] = {
        "exact_removed": exact_removed,
        "near_removed": grouped["near_removed"],
        "clusters": grouped["clusters"],
        "candidate_pairs": grouped["candidates"],
        "rows": sum(len(d) for d in kept_parts.values()),
        "short_documents": sum(r["short"] for results in first.values() for r in results),
    }
    # The removed documents' multiset hash (grouping.removed_digest), not their list: K-independent.
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION, params, grouped["removed"])
    if not state.parts:
        if stats["rows"] == 0:
            raise DataError("no document is left after deduplication", step="dedup")
        return StepResult(replace(state, data=kept_parts["all"]), fp, params=params, stats=stats)
    stats["straddling"] = grouped["straddling"]
    part_fps = {name: fingerprint(fp, name) for name in kept_parts}
    return StepResult(
        replace(state, parts=kept_parts, part_fps=part_fps), fp, parts=part_fps, params=params, stats=stats
    )


def _grouped(
    engine: Any, folder: Path, buckets: int, parts: dict[int, DocumentSet], threshold: float
) -> dict[str, Any]:
    """Dedup's grouping on the workers (:mod:`.grouping`): pairs routed, confirmed, connected, removed per shard.

    The documents are sharded ``buckets`` ways (from the partitions, never the workers: the
    shards are the same on any engine); every task holds one shard's rows.

    Returns:
        ``candidates`` (distinct candidate pairs), ``near_removed``, ``clusters``, ``straddling``
        (confirmed pairs across parts with neither side removed), ``removed`` (the removed
        documents' multiset hash, :func:`~.grouping.removed_digest`, summed) and ``rounds``.
    """
    # Pairs are confirmed per pair bucket: at least four per worker, so every worker has a share.
    pair_buckets = max(buckets, 4 * int(getattr(engine, "workers", 1)))
    engine.map(
        grouping.route_pairs,
        [
            {
                "folder": folder / "bands" / f"b{b:05d}",
                "out": folder / "pairs",
                "buckets": pair_buckets,
                "name": b,
            }
            for b in range(buckets)
        ],
        desc="dedup groups",
    )
    confirmed = engine.map(
        grouping.confirm_bucket,
        [
            {
                "folder": folder / "pairs" / f"q{q:05d}",
                "parts": parts,
                "threshold": threshold,
                "ngram": NGRAM,
                "chunk": PAIRS_PER_TASK,
                "rows": components.state_folder(folder / "components", 0),
                "keys": folder / "keys",
                "across": folder / "across",
                "shards": buckets,
                "name": f"{q:05d}",
            }
            for q in range(pair_buckets)
        ],
        desc="dedup pairs",
    )
    shutil.rmtree(folder / "pairs", ignore_errors=True)
    removals = grouping.remove_components(engine, folder, buckets)
    # Only a wrong order (dedup after the split) has confirmed pairs across parts.
    across = any(c["across"] for c in confirmed)
    straddling = grouping.count_straddling(engine, folder, buckets, removals["settled"]) if across else 0
    return {
        "candidates": sum(c["candidates"] for c in confirmed),
        "straddling": straddling,
        **{key: removals[key] for key in ("near_removed", "clusters", "removed", "rounds")},
    }

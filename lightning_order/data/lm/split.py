"""The LM step ``split``: train/validation by the seeded hash of each document, per canonical partition.

The assignment is stable as the corpus grows, and exact duplicates (removed before, by ``dedup``)
could never straddle it. Run before ``clean`` (a wrong order), the input is keyed as it is
(:func:`~.cleaning.partitioned`).
"""

from __future__ import annotations

from dataclasses import replace

from lightning_order.data.engine.partitions import DocumentSet
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.lm import tasks
from lightning_order.data.lm.cleaning import partitioned
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import LM_STEPS, engine_of, scratch
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["split"]


@LM_STEPS.register(
    "split",
    takes=ROWS,
    reads="data",
    writes_data=True,
    partitions=("train", "val"),
    config=("val_fraction", "seed", "sources"),
)
def split(ctx: StepContext, state: DataState) -> StepResult:
    """Train/validation by the seeded hash of each document's word sequence (stable as the corpus grows)."""
    cfg: LMConfig = ctx.config
    docs = partitioned(ctx, state.data, "all", int(state.extra["partitions"]))
    out = {name: scratch(ctx, "split", name) for name in ("train", "val")}
    sources = len(cfg.source_list) or 1  # a mixture: each source's files apart (mixture.py)
    mixed = {"sources": sources, "partitions": docs.count} if sources > 1 else {}
    files = docs.count * sources  # what pack checks: each source's files apart, as written here
    items = [tasks.SplitItem(docs, p, cfg.val_fraction, cfg.seed, out, **mixed) for p in range(docs.count)]
    results = engine_of(ctx).map(tasks.split_partition, items, weight=docs.text_bytes, desc="split")
    params = {"val_fraction": cfg.val_fraction, "seed": cfg.seed, "key": "document"}
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION)
    parts, part_fps, stats = {}, {}, {}
    for name in ("train", "val"):
        rows = sum(r[name]["rows"] for r in results)
        if rows == 0:
            raise DataError(
                f"the {name} split is empty ({len(docs)} documents, val_fraction={cfg.val_fraction}); "
                "use more documents or another val_fraction",
                step="split",
            )
        parts[name] = DocumentSet(out[name], files, True, rows, sum(r[name]["text_bytes"] for r in results))
        part_fps[name] = fingerprint(fp, name, [r[name]["digest"] for r in results])
        stats[f"{name}_rows"] = rows
        if mixed:
            stats[f"{name}_source_rows"] = [
                sum(r[name]["source_rows"][s] for r in results) for s in range(sources)
            ]
    return StepResult(
        replace(
            state,
            data=None,
            parts=parts,
            part_fps=part_fps,
            extra={**state.extra, "source_files": files} if mixed else state.extra,
        ),
        fp,
        parts=part_fps,
        params=params,
        stats=stats,
    )

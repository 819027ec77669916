"""The LM step ``clean``: every document cleaned, keyed and written into the canonical partitions.

``clean`` cleans, keys and routes every document to the partition of its key, and sorts each
partition by key: the canonical partitions, the same whichever processes wrote them
(:func:`partition`). A step that needs partitions and runs before ``clean`` (a wrong order:
``split`` or ``dedup`` first) keys the input as it is (:func:`partitioned`).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any

from lightning_order.data.engine.partitions import DocumentSet
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.lm import tasks
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import LM_STEPS, engine_of, parts_of, scratch
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["clean", "partition", "partitioned"]


def partition(ctx: StepContext, source: Any, name: str, clean: bool, count: int) -> tuple[DocumentSet, dict]:
    """``source`` (chunks or a DocumentSet) cleaned or not, keyed and written to ``count`` canonical partitions."""
    cfg: LMConfig = ctx.config
    engine = engine_of(ctx)
    out = scratch(ctx, f"{'clean' if clean else 'keyed'}-{name}")
    items = [
        tasks.CleanItem(
            (_readable(source, i), i), out / "fragments", count, clean, cfg.eos_token, ctx.hooks.get("clean")
        )
        for i in range(source.count)
    ]
    first = engine.map(tasks.clean_chunk, items, weight=source.text_bytes, desc=f"clean {name}")
    # Each partition's fragments are the files of its folder: no list of chunks crosses to a worker.
    merge = [tasks.MergeItem(p, out / "fragments" / f"p{p:05d}", out) for p in range(count)]
    merged = engine.map(tasks.merge_partition, merge, weight=source.text_bytes, desc=f"partition {name}")
    folders = [tasks.FolderItem(out / "fragments" / f"p{p:05d}") for p in range(count)]
    engine.map(tasks.remove_folder, folders, weight=source.text_bytes, desc=f"tidy {name}")
    shutil.rmtree(out / "fragments", ignore_errors=True)  # what is left: empty folders
    rows = sum(r["rows"] for r in merged)
    documents = DocumentSet(out, count, True, rows, sum(r["text_bytes"] for r in merged))
    stats = {
        "rows_in": sum(r["rows_in"] for r in first),
        "rows": rows,
        "dropped_empty": sum(r["dropped_empty"] for r in first),
        "dropped_null": sum(r["dropped_null"] for r in first),
        "bom_stripped": sum(r["bom_stripped"] for r in first),
        "digest": fingerprint([r["digest"] for r in merged]),
    }
    return documents, stats


def _readable(source: Any, index: int) -> Any:
    """What work item ``index`` carries to read its file: the one chunk (O(1), never the chunk list), or the DocumentSet."""
    from lightning_order.data.lm.documents import Chunks

    return source.work_item(index) if isinstance(source, Chunks) else source


def partitioned(ctx: StepContext, source: Any, name: str, count: int) -> DocumentSet:
    """``source`` as canonical partitions (the input chunks keyed as they are, uncleaned: a wrong order)."""
    return source if source.partitioned else partition(ctx, source, name, False, count)[0]


@LM_STEPS.register("clean", takes=ROWS, reads="data", writes_data=True, config=("eos_token", "overrides"))
def clean(ctx: StepContext, state: DataState) -> StepResult:
    """Cleans every document (:func:`~.documents.clean_document`), keys it and writes the canonical partitions.

    Empty documents are dropped and counted (``dropped_empty``), so are null text values
    (``dropped_null``); a byte order mark starting a document (a UTF-8 file saved with one) is
    removed and counted (``bom_stripped``).
    """
    count = int(state.extra["partitions"])
    cleaned, stats = {}, {"rows_in": 0, "rows": 0, "dropped_empty": 0, "dropped_null": 0, "bom_stripped": 0}
    digests = []
    for name, source in parts_of(state).items():
        cleaned[name], found = partition(ctx, source, name, True, count)
        digests.append(found.pop("digest"))
        for key in stats:
            stats[key] += found[key]
    if stats["rows"] == 0 or any(len(docs) == 0 for docs in cleaned.values()):
        raise DataError(
            f"no document is left after cleaning ({stats['rows_in']} read: {stats['dropped_empty']} empty or "
            f"whitespace, {stats['dropped_null']} null); check text_column",
            step="clean",
        )
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION, digests)
    if state.parts:
        part_fps = {name: fingerprint(fp, name) for name in cleaned}
        return StepResult(replace(state, parts=cleaned, part_fps=part_fps), fp, parts=part_fps, stats=stats)
    return StepResult(replace(state, data=cleaned["all"]), fp, stats=stats)

"""The LM step ``load``: the input read as chunks of rows in corpus order, and the number of partitions.

The documents come from :mod:`.documents` (the standard library's documentation, :mod:`.corpus`,
or ``text_column`` of a dataset); the number of partitions is chosen from the corpus size (or
``num_partitions``) and recorded, so every later step splits its work the same way.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lightning_order.data.engine.partitions import partition_count
from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import LM_STEPS, engine_of
from lightning_order.ledger import fingerprint

__all__ = ["load"]


@LM_STEPS.register(
    "load",
    takes=frozenset({None}),
    makes="rows",
    reads="none",
    writes_data=True,
    config=(
        "dataset",
        "data_files",
        "dataset_config",
        "load_split",
        "text_column",
        "max_documents",
        "sample_by",
        "sources",
        "num_partitions",
    ),
)
def load(ctx: StepContext, state: DataState) -> StepResult:
    """Reads the documents (the standard library's documentation, or ``text_column`` of a dataset) as chunks."""
    from lightning_order.data.lm.documents import read_input
    from lightning_order.data.lm.mixture import read_sources

    cfg: LMConfig = ctx.config
    work = ctx.work if ctx.work is not None else Path(".")
    engine = engine_of(ctx)
    chunks, info = read_sources(cfg, work, engine) if cfg.sources else read_input(cfg, work, engine)
    count = partition_count(chunks.text_bytes, cfg.num_partitions)
    getattr(engine, "start", lambda weight: None)(chunks.text_bytes)  # workers forked before any thread pool
    corpus = info.get("corpus") or fingerprint("files", cfg.mixture_identity or cfg.input_identity)
    # the built-in corpus is no field: its identity (Python build, module source) enters here
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION, cfg.load_identity().get("stdlib_corpus"), corpus)
    return StepResult(
        replace(state, data=chunks, extra={**state.extra, "partitions": count}),
        fp,
        params={
            "dataset": cfg.dataset or ("mixture" if cfg.sources else "stdlib-docs"),
            "corpus": corpus,
            "partitions": count,
            **({"sources": [s.name for s in cfg.source_list]} if cfg.sources else {}),
        },
        # Where the work ran is a statistic: no fingerprint (the manifest's included) depends on it.
        stats={
            "rows": chunks.rows,
            "bytes": chunks.text_bytes,
            "null_rows": info["null_rows"],
            "engine": engine.name,
            "workers": engine.workers,
            **({"source_rows": info["source_rows"]} if cfg.sources else {}),
        },
    )

"""Step 1, ``load``: the rows to prepare, from the demo corpus or :func:`datasets.load_dataset`.

The configured columns are checked here, before any work: a missing column, an empty dataset, a
text column that holds no strings or a label column with one class is a
:class:`~lightning_order.errors.DataError` naming the column. A file ``datasets`` cannot read is
explained (:func:`~.inputs.diagnose_files`: no rows, a header only, not UTF-8). The files read are
the expanded ``data_files`` the cache key identified; one that changed since is refused. Only the
configured columns are kept. The output fingerprint hashes the load identity (dataset, each
file's content hash, demo parameters) and the row count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lightning_order.data.engine.inputs import diagnose_files, local_files
from lightning_order.data.engine.reading import load_files
from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.demo import make_demo_corpus
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

if TYPE_CHECKING:  # datasets is imported when rows are loaded (a cache hit needs none)
    pass

__all__ = ["load"]


@STEPS.register(
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
        "demo_size",
        "demo_sources",
        "demo_seed",
        "text_column",
        "label_column",
        "numeric_columns",
        "group_column",
    ),
)
def load(ctx: StepContext, state: DataState) -> StepResult:
    """Reads the configured rows and checks their columns."""
    cfg: DataConfig = ctx.config
    hf_cache = None if ctx.work is None else ctx.work / "hf"
    if cfg.dataset is None:
        data = make_demo_corpus(
            cfg.demo_size, seed=cfg.demo_seed, sources=cfg.demo_sources, cache_dir=hf_cache
        )
    else:
        data = load_files(cfg, hf_cache)
    columns = [cfg.text_column, cfg.label_column, *cfg.numeric_columns]
    if cfg.group_column:
        columns.append(cfg.group_column)
    for column in columns:
        if column not in data.column_names:
            raise DataError(
                f"the configured column is not in the data (columns: {', '.join(data.column_names)}); "
                "fix text_column / label_column / numeric_columns / group_column",
                step="load",
                column=column,
            )
    if len(data) == 0:
        raise diagnose_files(local_files(cfg.input_files), cfg.dataset) or DataError(
            "the dataset is empty: there is nothing to prepare", step="load"
        )
    dtype = getattr(data.features[cfg.text_column], "dtype", None)
    if dtype not in ("string", "large_string"):
        raise DataError(
            f"expected a string column for the text, got {data.features[cfg.text_column]}; "
            "set text_column to the column that holds the text",
            step="load",
            column=cfg.text_column,
        )
    classes = data.unique(cfg.label_column)
    if len(classes) < 2:
        raise DataError(
            f"expected at least 2 classes in the label column, got {len(classes)} ({classes[:1]!r}): "
            "a classifier with num_classes=1 learns nothing; set label_column to the column that holds "
            "the classes, or add rows of the other classes",
            step="load",
            column=cfg.label_column,
        )
    fp = fingerprint(ctx.fingerprint, CODE_VERSION, len(data))
    return StepResult(
        replace(state, data=data.select_columns(list(dict.fromkeys(columns)))),
        fp,
        params={"dataset": cfg.dataset or "demo"},
        stats={"rows": len(data)},
    )

"""Arrow tables in and out of the steps: contiguous batches read once, written once, memory-mapped.

The vectorised steps read a :class:`datasets.Dataset` as Arrow record batches (no per-row Python,
no ``datasets`` formatting), transform each batch, and stream the result into one Arrow file in
the preparation's scratch folder, which is then memory-mapped as a :class:`datasets.Dataset`
again: the data is never held in memory as a whole, and no ``datasets.map`` writer re-casts it
row by row. :func:`save_part` publishes an encoded part by moving its file into the cache folder
(``save_to_disk``'s layout: the Arrow file, ``state.json``, ``dataset_info.json``) instead of
copying it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa

from lightning_order.data.engine.runner import DataState, StepContext
from lightning_order.ledger import fingerprint

__all__ = [
    "BATCH_ROWS",
    "apply_tables",
    "batches",
    "map_table",
    "ordered_map",
    "save_part",
    "write_dataset",
    "write_split",
]

#: Rows per batch of the vectorised steps (a few MB of text: cache-friendly, bounded memory).
BATCH_ROWS = 65536


def batches(
    dataset: datasets.Dataset, columns: Sequence[str] | None = None, size: int | None = None
) -> Iterator[pa.Table]:
    """The rows of ``dataset`` (``columns`` of them, default all) as Arrow tables of at most ``size`` rows."""
    size = size or BATCH_ROWS
    view = dataset if columns is None else dataset.select_columns(list(columns))
    if view._indices is None:  # a plain memory-mapped table: slice it, zero-copy
        table = view.data.table
        for start in range(0, table.num_rows, size):
            yield table.slice(start, size)
        return
    yield from view.with_format("arrow").iter(batch_size=size)


def write_dataset(
    tables: Iterable[pa.Table], features: datasets.Features, work: Path | None, name: str
) -> datasets.Dataset:
    """Streams ``tables`` into one Arrow file in ``work`` and returns it memory-mapped.

    Args:
        tables: the batches, each with the columns of ``features`` (cast to its schema).
        features: the dataset's features (their schema, with the ``datasets`` metadata, is written).
        work: the scratch folder; ``None`` keeps the table in memory (small data, ``setup``).
        name: a name for the file (made unique here).
    """
    schema = features.arrow_schema
    if work is None:
        parts = [t.cast(schema) for t in tables]
        table = pa.concat_tables(parts) if parts else schema.empty_table()
        return datasets.Dataset(
            datasets.table.InMemoryTable(table), info=datasets.DatasetInfo(features=features)
        )
    path = work / f"{name}-{uuid.uuid4().hex[:8]}.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for table in tables:
            writer.write_table(table.select(schema.names).cast(schema))
    return datasets.Dataset.from_file(str(path), info=datasets.DatasetInfo(features=features))


def write_split(
    pairs: Iterable[tuple[pa.Table, pa.Table]], features: datasets.Features, work: Path | None, name: str
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Streams ``(train batch, val batch)`` pairs into two Arrow files in one pass; both memory-mapped."""
    if work is None:
        train, val = [], []
        for t, v in pairs:
            train.append(t)
            val.append(v)
        return write_dataset(train, features, None, ""), write_dataset(val, features, None, "")
    schema = features.arrow_schema
    paths = [work / f"split-{name}-{part}-{uuid.uuid4().hex[:8]}.arrow" for part in ("train", "val")]
    with pa.OSFile(str(paths[0]), "wb") as train_sink, pa.OSFile(str(paths[1]), "wb") as val_sink:
        with pa.ipc.new_stream(train_sink, schema) as train, pa.ipc.new_stream(val_sink, schema) as val:
            for t, v in pairs:
                train.write_table(t.select(schema.names).cast(schema))
                val.write_table(v.select(schema.names).cast(schema))
    info = datasets.DatasetInfo(features=features)
    return datasets.Dataset.from_file(str(paths[0]), info=info), datasets.Dataset.from_file(
        str(paths[1]), info=info
    )


def ordered_map(function: Callable[[Any], Any], items: Iterable[Any], workers: int = 1) -> Iterator[Any]:
    """``map(function, items)`` on ``workers`` threads, in order, with at most ``2 * workers`` in flight.

    Arrow's compute kernels release the GIL, so the batches of a vectorised step run in parallel;
    the window bounds the memory to a few batches however large the data.
    """
    if workers <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        window: deque[Future[Any]] = deque()
        for item in items:
            window.append(pool.submit(function, item))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def map_table(
    dataset: datasets.Dataset,
    function: Callable[[pa.Table], pa.Table],
    features: datasets.Features,
    work: Path | None,
    name: str,
    workers: int = 1,
) -> datasets.Dataset:
    """``function`` applied to every batch of ``dataset`` on ``workers`` threads, written once in order."""
    return write_dataset(ordered_map(function, batches(dataset), workers), features, work, name)


def apply_tables(
    ctx: StepContext,
    state: DataState,
    fp: str,
    name: str,
    function: Callable[[pa.Table], pa.Table],
    features: Callable[[datasets.Features], datasets.Features] | None = None,
) -> DataState:
    """A row-wise table function applied to the whole data, or to each part (fingerprints per part).

    The Arrow counterpart of :func:`~.steps.apply_rowwise`: ``features`` maps the input's
    features to the output's (default: unchanged).
    """

    def run(data: datasets.Dataset, label: str) -> datasets.Dataset:
        out = features(data.features.copy()) if features is not None else data.features
        workers = getattr(ctx.config, "num_proc", None) or 1
        return map_table(data, function, out, ctx.work, f"{name}-{label}", workers)

    if state.parts:
        part_fps = {part: fingerprint(fp, part) for part in state.parts}
        parts = {part: run(data, part) for part, data in state.parts.items()}
        return replace(state, parts=parts, part_fps=part_fps)
    return replace(state, data=run(state.data, "all"))


def save_part(part: datasets.Dataset, dest: Path) -> None:
    """Writes ``part`` at ``dest`` in ``save_to_disk``'s layout, moving its file when it is a scratch file.

    A part backed by exactly one Arrow file of its own (written by :func:`write_dataset`, no
    index mapping) is moved into place; anything else is saved with ``save_to_disk``.
    """
    files = [f["filename"] for f in part.cache_files]
    own = len(files) == 1 and part._indices is None and Path(files[0]).name.startswith("encode-")
    if not own:
        part.save_to_disk(str(dest))
        return
    dest.mkdir(parents=True)
    os.replace(files[0], dest / "data-00000-of-00001.arrow")
    state: dict[str, Any] = {
        key: part.__dict__[key]
        for key in (
            "_fingerprint",
            "_format_columns",
            "_format_kwargs",
            "_format_type",
            "_output_all_columns",
        )
    }
    state["_split"] = str(part.split) if part.split is not None else None
    state["_data_files"] = [{"filename": "data-00000-of-00001.arrow"}]
    (dest / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    info = asdict(part._info)
    (dest / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2))

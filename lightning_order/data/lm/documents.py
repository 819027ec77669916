"""LM documents: the cleaning of one document, its keys, and the input read as chunks of Arrow rows.

:func:`clean_document` is the one definition of a cleaned document (line structure kept, so code
and lists read as such). :func:`document_keys` gives the two hashes that place a document: the
128-bit hash of its *normalised* text (lower-cased words joined by one space: exact duplicates
share it; its low half picks the partition, the pair orders the partition) and the 64-bit hash
of the text itself (which of two exact duplicates is kept).

:func:`read_input` reads what ``load`` reads (the built-in corpus, or ``datasets.load_dataset``
of the configured files: a memory-mapped Arrow table) and returns it as :class:`ChunkSource`
items of at most :data:`CHUNK_ROWS` rows, in corpus order: the work items of the ``clean`` step.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lightning_order.data.engine.long_texts import LONG_TEXT_CHARS, PIECE_CHARS, cleaning_pieces
from lightning_order.data.engine.partitions import write_table
from lightning_order.data.lm.shingles import normalised_digest
from lightning_order.errors import DataError

__all__ = [
    "CHUNK_ROWS",
    "ChunkSource",
    "Chunks",
    "clean_document",
    "document_keys",
    "read_input",
    "read_on_workers",
]

#: Documents per work item of the first pass (a few MB of text: one process's share at a time).
CHUNK_ROWS = 8192
#: The control characters cleaning drops (every C0 one but tab and newline, and DEL). Searched
#: first: most documents hold none, and a regex scan is several times faster than ``str.translate``.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TRAILING = re.compile(r"[ \t]+\n")
_BLANK_LINES = re.compile(r"\n{3,}")


def clean_document(text: str, eos_token: str = "<|endoftext|>") -> str:
    """One document cleaned for language modelling: line structure and indentation kept.

    Unicode NFKC, line ends made ``\\n``, control characters dropped, *then* the end-of-text
    marker removed (only ``encode`` may place it; removed after the control characters, so a
    marker split by one cannot form again), trailing spaces stripped, three or more line breaks
    made two, blank lines at both ends dropped (a first line's indentation is kept). A long
    document is cleaned in pieces (:func:`~.long_texts.cleaning_pieces`) to the same text.
    """
    if len(text) <= LONG_TEXT_CHARS:
        return _clean(text, eos_token, first=True, last=True)
    cleaned: list[str] = []
    pieces = cleaning_pieces(text)
    piece = next(pieces)
    for following in pieces:
        cleaned.append(_clean(piece, eos_token, first=not cleaned, last=False))
        piece = following
    cleaned.append(_clean(piece, eos_token, first=not cleaned, last=True))
    return "".join(cleaned)


def _clean(text: str, eos_token: str, first: bool, last: bool) -> str:
    text = unicodedata.normalize("NFKC", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _CONTROL.search(text):
        text = _CONTROL.sub("", text)
    if eos_token and eos_token in text:
        text = text.replace(eos_token, " ")
    if last:
        text += "\n"
    if " \n" in text or "\t\n" in text:
        text = _TRAILING.sub("\n", text)
    if "\n\n\n" in text:
        text = _BLANK_LINES.sub("\n\n", text)
    if first:
        text = text.lstrip("\n")
    return text.rstrip() if last else text


def document_keys(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(key_hi, key_lo, text_hash)`` (uint64 each) of every text (see the module docstring)."""
    count = len(texts)
    hi = np.empty(count, dtype=np.uint64)
    lo = np.empty(count, dtype=np.uint64)
    own = np.empty(count, dtype=np.uint64)
    for i, text in enumerate(texts):
        key = normalised_digest(text, xxhash.xxh3_128())
        hi[i], lo[i] = key >> 64, key & 0xFFFFFFFFFFFFFFFF
        own[i] = _text_hash(text)
    return hi, lo, own


def _text_hash(text: str) -> int:
    """xxh3-64 of ``text``'s UTF-8 bytes (a long text encoded a piece at a time)."""
    if len(text) <= LONG_TEXT_CHARS:
        return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))
    hasher = xxhash.xxh3_64()
    for start in range(0, len(text), PIECE_CHARS):
        hasher.update(text[start : start + PIECE_CHARS].encode("utf-8", "surrogatepass"))
    return hasher.intdigest()


@dataclass(frozen=True)
class ChunkSource:
    """Rows ``[start, stop)`` of an Arrow table: one work item of the first pass.

    Attributes:
        index: the chunk's place in corpus order.
        start, stop: its rows.
        path: an Arrow IPC file holding the ``text`` column (the built-in corpus), or ``None``.
        dataset: a memory-mapped ``datasets.Dataset`` (pickled by reference to its files).
        column: the text column.
        origin: the index of its source in a mixture (``None``: the only source).
    """

    index: int
    start: int
    stop: int
    path: str | None = None
    dataset: Any = None
    column: str = "text"
    origin: int | None = None

    def table(self) -> pa.Table:
        """The chunk's rows (a zero-copy slice of the memory-mapped source)."""
        if self.path is not None:
            from lightning_order.data.engine.partitions import read_table

            whole = read_table(Path(self.path), [self.column])
        else:
            whole = self.dataset.data.table.select([self.column])
        return whole.slice(self.start, self.stop - self.start)

    def texts(self, keep_nulls: bool = False) -> list[Any]:
        """The chunk's texts (nulls dropped unless ``keep_nulls``): what one ``clean`` work item reads."""
        values = self.table().column(0).to_pylist()
        return values if keep_nulls else [v for v in values if v is not None]


@dataclass(frozen=True)
class Chunks:
    """The input as read by ``load``: chunks of rows in corpus order (not yet partitioned).

    It reads like a :class:`~lightning_order.data.engine.partitions.DocumentSet` (``count``,
    ``texts(i)``, ``rows``, ``text_bytes``), so a step that runs before ``clean`` (a wrong order)
    works on it too.
    """

    sources: tuple[ChunkSource, ...]
    rows: int
    text_bytes: int
    partitioned: bool = False

    @property
    def count(self) -> int:
        """How many chunks."""
        return len(self.sources)

    def texts(self, index: int, keep_nulls: bool = False) -> list[Any]:
        """The texts of chunk ``index`` (nulls dropped unless ``keep_nulls``)."""
        return self.sources[index].texts(keep_nulls)

    def work_item(self, index: int) -> ChunkSource:
        """What a work item names to read chunk ``index``: that chunk alone (never the whole chunk list)."""
        return self.sources[index]

    def __len__(self) -> int:
        return self.rows


def _chunks(total: int, **source: Any) -> tuple[ChunkSource, ...]:
    return tuple(
        ChunkSource(i, start, min(start + CHUNK_ROWS, total), **source)
        for i, start in enumerate(range(0, total, CHUNK_ROWS))
    )


def read_input(cfg: Any, work: Path, engine: Any = None) -> tuple[Chunks, dict[str, Any]]:
    """The documents ``load`` reads, as chunks in corpus order, and what it found.

    With an ``engine``, JSON lines, Parquet and text files (local, or objects in a store) are read
    by its workers, range by range (:func:`read_on_workers`); other inputs through ``datasets``.

    Returns:
        ``(chunks, info)``: ``info`` holds ``null_rows`` and, for the built-in corpus,
        ``corpus`` (its fingerprint).

    Raises:
        DataError: the text column is missing or holds no text, text values differ in type
            between files, or nothing is left to read.
    """
    if cfg.dataset is None:
        from lightning_order.data.lm.corpus import corpus_fingerprint, stdlib_corpus

        docs = stdlib_corpus(cfg.max_documents)
        path = work / "load" / "chunk-00000.arrow"
        write_table(pa.table({"text": pa.array(docs, pa.large_string())}), path)
        size = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs)
        chunks = Chunks(_chunks(len(docs), path=str(path)), len(docs), size)
        return chunks, {"null_rows": 0, "corpus": corpus_fingerprint(docs)}
    from lightning_order.data.engine.reading import load_files
    from lightning_order.data.lm.file_ranges import worker_files

    files = worker_files(cfg) if engine is not None else None
    if files is not None:
        return read_on_workers(cfg, work / "read", engine, files)
    options = {"sample_by": cfg.sample_by, "keep_linebreaks": True} if cfg.dataset == "text" else {}
    data = load_files(cfg, work / "hf", **options)
    if cfg.text_column not in data.column_names:
        raise DataError(
            f"the text column is not in the data (columns: {', '.join(data.column_names)}); set text_column",
            step="load",
            column=cfg.text_column,
        )
    kind = data.features[cfg.text_column]
    if getattr(kind, "dtype", None) not in ("string", "large_string"):
        raise DataError(
            f"expected a string column for the text, got {kind}; set text_column to the column that holds "
            "the documents",
            step="load",
            column=cfg.text_column,
        )
    if cfg.max_documents is not None:
        data = data.select(range(min(len(data), cfg.max_documents)))
        data = data.flatten_indices(keep_in_memory=False, cache_file_name=str(work / "hf" / "first.arrow"))
    column = data.data.table.column(cfg.text_column)
    nulls = int(column.null_count)
    text_bytes = int(pc.sum(pc.binary_length(column)).as_py() or 0)
    if len(data) == nulls:
        what = (
            "the dataset is empty" if len(data) == 0 else f"every one of its {len(data)} text values is null"
        )
        raise DataError(
            f"{what}; set text_column to the column that holds the text", step="load", column=cfg.text_column
        )
    chunks = Chunks(_chunks(len(data), dataset=data, column=cfg.text_column), len(data) - nulls, text_bytes)
    return chunks, {"null_rows": nulls}


def read_on_workers(
    cfg: Any, work: Path, engine: Any, files: list[Path | str]
) -> tuple[Chunks, dict[str, Any]]:
    """The input read by ``engine``'s workers, range by range, as :class:`Chunks` in corpus order.

    The driver plans the ranges, maps :func:`~.range_reading.read_range` over them between the
    input identity checks (:func:`~.reading.checked_read`), and keeps one chunk per range that
    holds rows (each read in batches by ``clean``'s worker).

    Returns:
        ``(chunks, info)``: ``info`` holds ``null_rows``.

    Raises:
        DataError: every file is empty, a file changed before or while it was read, a worker
            refused its range, the text column is absent, or every text value is null.
    """
    from lightning_order.data.engine.reading import checked_read
    from lightning_order.data.lm.file_ranges import file_size, plan_ranges, range_size
    from lightning_order.data.lm.range_reading import read_range

    sizes = [file_size(cfg, path) for path in files]
    if all(size == 0 for size in sizes):
        raise DataError(
            f"the dataset is empty: every data file is empty ({', '.join(map(str, files))})", step="load"
        )
    out = work / "ranges"
    size = range_size(sum(sizes), getattr(engine, "workers", 1))
    # An object's worker reaches the store with the user's options (held in memory, never written).
    options = dict(getattr(cfg, "storage_options", None) or {}) or None
    items = [{"range": fr, "out": out, "storage_options": options} for fr in plan_ranges(cfg, files, size)]
    getattr(engine, "start", lambda weight: None)(sum(sizes))  # workers forked before any thread pool
    results = checked_read(cfg, lambda: engine.map(read_range, items, weight=sum(sizes), desc="load"))
    rows, nulls = sum(r["rows"] for r in results), sum(r["nulls"] for r in results)
    column = cfg.text_column
    if rows == nulls:
        if all(r["absent"] for r in results) and rows:
            raise DataError("the text column is not in the data; set text_column", step="load", column=column)
        what = "the dataset is empty" if rows == 0 else f"every one of its {rows} text values is null"
        raise DataError(
            f"{what}; set text_column to the column that holds the text", step="load", column=column
        )
    sources = tuple(
        ChunkSource(i, start, stop, path=path) for i, (path, start, stop) in enumerate(_slices(results, size))
    )
    return Chunks(sources, rows - nulls, sum(r["text_bytes"] for r in results)), {"null_rows": nulls}


def _slices(results: list[dict[str, Any]], size: int) -> list[tuple[str, int, int]]:
    """``clean``'s items: each read range's rows, cut in even slices of about ``size`` bytes of text.

    A range is a byte range or a run of Parquet row groups; one row group can hold far more than
    ``size`` (a file written with one group), and as one item it would be cleaned by one worker.
    O(ranges) on the driver: the cut is by row counts, from the range's bytes and rows.
    """
    out = []
    for result in results:
        rows = int(result["rows"])
        if not rows:
            continue
        pieces = max(1, min(rows, -(-int(result["text_bytes"]) // max(size, 1))))
        bounds = [rows * k // pieces for k in range(pieces + 1)]
        out.extend((result["path"], a, b) for a, b in itertools.pairwise(bounds))
    return out

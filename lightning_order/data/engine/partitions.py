"""Documents on disk in a recorded number of canonical partitions: the unit of streaming work.

A :class:`DocumentSet` is a folder of Arrow IPC files (memory-mapped when read, never held in
memory as a whole) and, after deduplication, a keep mask per file. Before the corpus is
partitioned, its files are *chunks* of the input in corpus order (``chunk-00000.arrow``...);
once partitioned, file ``part-<p>.arrow`` holds every document whose key hash falls in
partition ``p`` of :attr:`DocumentSet.count`, sorted by that key. The partition of a document
and its place inside it depend on its content alone, so the files are the same whichever
process or machine wrote them, and so is everything computed from them in partition order.

Columns: ``text`` (large string) always; once partitioned also ``key_hi``, ``key_lo`` (the
128-bit hash of the document's normalised text: exact duplicates share it) and ``text_hash``
(the 64-bit hash of the text itself); after the split ``doc_hash`` (int64, the unseeded hash of
the document's split key, which the leakage checks compare).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from lightning_order.errors import DataError

__all__ = [
    "KEY_COLUMNS",
    "DocumentSet",
    "PartitionedTexts",
    "TextColumn",
    "partition_count",
    "read_table",
    "table_digest",
    "write_table",
]

#: The columns that place a document: its partition and its order inside it.
KEY_COLUMNS: tuple[str, ...] = ("key_hi", "key_lo", "text_hash")
#: The text a partition holds when the count is chosen from the corpus size.
TARGET_PARTITION_BYTES = 32 << 20
MIN_PARTITIONS = 4
MAX_PARTITIONS = 1 << 14


def partition_count(text_bytes: int, requested: int | None = None) -> int:
    """The partitions of a corpus of ``text_bytes``: ``requested``, else a power of two near 32 MB each (4 to 16 384)."""
    if requested is not None:
        return int(requested)
    wanted = max(1, -(-int(text_bytes) // TARGET_PARTITION_BYTES))
    count = 1 << (wanted - 1).bit_length()
    return max(MIN_PARTITIONS, min(MAX_PARTITIONS, count))


def write_table(table: pa.Table, path: Path) -> None:
    """Writes ``table`` as one Arrow IPC file (atomic: a temporary name, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1 << 16)
    os.replace(tmp, path)


def read_table(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The Arrow IPC file at ``path``, memory-mapped (zero-copy)."""
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    return table.select(list(columns)) if columns is not None else table


def table_digest(table: pa.Table, columns: Sequence[str] = KEY_COLUMNS) -> str:
    """An xxh3-128 hash of ``columns`` of ``table`` (its rows' identity, in its order)."""
    digest = xxhash.xxh3_128()
    digest.update(table.num_rows.to_bytes(8, "little"))
    for name in columns:
        digest.update(np.ascontiguousarray(table.column(name).to_numpy()).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class DocumentSet:
    """Documents in Arrow files under :attr:`folder` (see the module docstring).

    Attributes:
        folder: where the files are.
        count: how many files (partitions, or chunks before partitioning).
        partitioned: whether file ``p`` is partition ``p`` of the documents' key hash.
        rows: documents held (kept ones only, after deduplication).
        text_bytes: UTF-8 bytes of their text.
        masks: per file, the path of a boolean keep mask (``.npy``); ``None``: all kept.
    """

    folder: Path
    count: int
    partitioned: bool
    rows: int
    text_bytes: int
    masks: tuple[str | None, ...] | None = None

    def path(self, index: int) -> Path:
        """The file of partition (or chunk) ``index``."""
        prefix = "part" if self.partitioned else "chunk"
        return self.folder / f"{prefix}-{index:05d}.arrow"

    def mask(self, index: int) -> np.ndarray | None:
        """The keep mask of file ``index``, or ``None`` when every row is kept."""
        if self.masks is None or self.masks[index] is None:
            return None
        return np.load(self.masks[index])

    def read(self, index: int, columns: Sequence[str] | None = None) -> pa.Table:
        """File ``index``'s kept rows (memory-mapped; a filtered copy when a mask drops rows)."""
        path = self.path(index)
        if not path.exists():
            return _empty(columns)
        table = read_table(path, columns)
        keep = self.mask(index)
        return table if keep is None else table.filter(pa.array(keep))

    def texts(self, index: int, keep_nulls: bool = False) -> list[str]:
        """The kept texts of file ``index``, in file order (a partition holds no null)."""
        return self.read(index, ["text"]).column("text").to_pylist()

    def text_column(self, index: int) -> TextColumn:
        """The kept texts of file ``index`` as a sequence made one text at a time (one huge document is held once)."""
        return TextColumn(self.read(index, ["text"]).column("text"))

    def __len__(self) -> int:
        return self.rows

    def with_masks(self, masks: Sequence[str | None], rows: int, text_bytes: int) -> DocumentSet:
        """The same files with keep masks (deduplication writes masks, never the text again)."""
        return replace(self, masks=tuple(masks), rows=rows, text_bytes=text_bytes)


def _empty(columns: Sequence[str] | None) -> pa.Table:
    names = list(columns) if columns is not None else ["text"]
    types = {"text": pa.large_string(), "doc_hash": pa.int64()}
    return pa.table({name: pa.array([], type=types.get(name, pa.uint64())) for name in names})


class TextColumn(Sequence[str]):
    """An Arrow text column as a read-only sequence of ``str``, each made when it is read."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._column[int(index)].as_py()

    def __iter__(self) -> Iterator[str]:
        for chunk in self._column.chunks:
            for i in range(len(chunk)):
                yield chunk[i].as_py()

    def utf8_views(self) -> Iterator[memoryview]:
        """Each text's UTF-8 bytes, zero-copy views of the column's buffers (never decoded whole)."""
        for chunk in self._column.chunks:
            _, offsets, data = chunk.buffers()
            kind = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
            bounds = np.frombuffer(offsets, dtype=kind)[chunk.offset : chunk.offset + len(chunk) + 1].tolist()
            view = memoryview(data) if data is not None else memoryview(b"")
            for start, end in itertools.pairwise(bounds):
                yield view[start:end]


class PartitionedTexts(Sequence[str]):
    """The texts of a :class:`DocumentSet` as a read-only sequence, read file by file on demand.

    ``len`` is known without reading; iterating reads one file at a time; indexing locates the
    file from the cumulative row counts. What ``dm.documents(split)`` returns.
    """

    def __init__(self, documents: DocumentSet, counts: Sequence[int]) -> None:
        self._documents = documents
        self._ends = np.cumsum(np.asarray(counts, dtype=np.int64))
        self._cached: tuple[int, list[str]] | None = None

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def _file(self, index: int) -> list[str]:
        if self._cached is None or self._cached[0] != index:
            self._cached = (index, self._read(index))
        return self._cached[1]

    def _read(self, index: int) -> list[str]:
        """File ``index``'s texts, exactly as many as recorded: a file deleted or changed since is refused.

        A missing file used to read as empty, so iteration yielded fewer documents than ``len``.
        """
        expected = int(self._ends[index] - (self._ends[index - 1] if index else 0))
        path = self._documents.path(index)
        if not path.exists():
            if not expected:
                return []  # a partition that received no document has no file
            raise self._changed(path, "missing", expected)
        try:
            texts = self._documents.texts(index)
        except (OSError, pa.ArrowException) as err:
            raise self._changed(path, f"unreadable ({type(err).__name__}: {err})", expected) from err
        if len(texts) != expected:
            raise self._changed(path, f"holding {len(texts)} documents", expected)
        return texts

    def _changed(self, path: Path, found: str, expected: int) -> DataError:
        return DataError(
            f"the prepared documents file {path} is {found}, the manifest records {expected}: it changed after "
            f"the cache was verified; prepare again (delete {self._documents.folder.parent.parent} and build "
            "the DataModule again)",
            step="setup",
        )

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = int(index) + (len(self) if int(index) < 0 else 0)
        if not 0 <= position < len(self):
            raise IndexError(f"document {index} of {len(self)}")
        file = int(np.searchsorted(self._ends, position, side="right"))
        start = int(self._ends[file - 1]) if file else 0
        return self._file(file)[position - start]

    def __iter__(self) -> Iterator[str]:
        for file in range(self._documents.count):
            yield from self._file(file)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"PartitionedTexts({len(self)} documents in {self._documents.count} files)"

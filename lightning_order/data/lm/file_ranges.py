"""The work items of ``load`` when workers read their own input: planned from file names and sizes only.

A JSON lines or text file is cut into byte ranges of :data:`RANGE_BYTES`; a worker reads the
records whose first byte lies in its range (:mod:`.range_reading`). A Parquet file gives one item
per run of row groups up to :data:`RANGE_BYTES`, from its footer (the items are mapped by
:func:`~.documents.read_input`). A text file read by paragraph
or as one document is one item (a paragraph may span any range). The driver holds the file
names, their sizes and row-group counts: never a document.

The worker path is taken only where it reads what ``datasets.load_dataset`` would read
(:func:`worker_files` names the files, or ``None``): uncompressed ``json`` (lines, not one array), ``parquet`` or
``text`` files named by ``data_files``, local or objects in a store (``s3://``...: each worker
reads its own byte ranges and row groups from the store, :data:`OBJECT_READ`; the driver never
downloads the corpus), no ``dataset_config``, the whole ``load_split`` and no
``max_documents`` (its prefix is taken by ``datasets``' path, unchanged). Everything else keeps
that path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_order.data.engine.inputs import local_files, object_files
from lightning_order.data.engine.object_store import is_url, open_input, remote_errors, url_filesystem
from lightning_order.data.engine.storage import read_errors

__all__ = [
    "MIN_RANGE_BYTES",
    "OBJECT_READ",
    "PARQUET_READ",
    "RANGE_BYTES",
    "FileRange",
    "file_size",
    "parquet_footer",
    "plan_ranges",
    "range_size",
    "worker_files",
]

#: Bytes of input per ``load`` work item (a few times a partition's text; tests lower it to split small files).
RANGE_BYTES = 64 << 20
#: The smallest range made to give every worker work: a smaller input is one item.
MIN_RANGE_BYTES = 1 << 20
#: Leading bytes of compressed files ``datasets`` would decompress on the fly (gzip, bz2, xz, zstd, zip, lz4).
_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"PK\x03\x04", b"\x04\x22\x4d\x18")
_BOM = b"\xef\xbb\xbf"
#: How a worker opens an object: requests of 256 KiB past what it asked for at most (s3fs reads
#: 50 MiB ahead by default: a range's worker would fetch most of the next range too).
OBJECT_READ = dict(block_size=256 << 10, cache_type="readahead")  # fsspec's block, not the LM's
#: How a worker opens a Parquet object: each of pyarrow's reads (the footer, the column's chunks,
#: coalesced by pyarrow) is one request of exactly its bytes.
PARQUET_READ = dict(block_size=256 << 10, cache_type="none")


@dataclass(frozen=True)
class FileRange:
    """One ``load`` work item: part of one input file.

    Attributes:
        index: the item's place in corpus order (files in ``data_files`` order, ranges in file order).
        path: the file.
        start, stop: bytes ``[start, stop)`` (JSON lines, text by line), row groups ``[start, stop)``
            (Parquet), or the whole file (text by paragraph or document).
        kind: ``"json"``, ``"parquet"`` or ``"text"``.
        column: the text column (``"text"`` for text files).
        sample_by: how text files are cut into documents (``datasets``' text builder's option).
    """

    index: int
    path: str
    start: int
    stop: int
    kind: str
    column: str = "text"
    sample_by: str = "line"


def worker_files(cfg: Any) -> list[Path | str] | None:
    """The files ``load_split`` reads when workers can read them as ``datasets`` would, else ``None``.

    Local files as paths, objects in a store as their URLs.

    Raises:
        DataError: a file or object whose first bytes cannot be read (a permission, an ``EIO``, a
            store that refuses or is gone), naming it.
    """
    if cfg.dataset not in ("json", "parquet", "text") or cfg.dataset_config is not None:
        return None
    if getattr(cfg, "max_documents", None) is not None:
        return None
    if cfg.dataset == "text" and cfg.text_column != "text":
        return None  # datasets' text builder names its column "text": its path explains the mismatch
    files = cfg.input_files
    if isinstance(files, dict):
        files = files.get(cfg.load_split)
    elif cfg.load_split != "train":
        return None  # data_files as a list is datasets' "train" split; anything else is its to explain
    if not files:
        return None
    names = [files] if isinstance(files, str) else list(files)
    local, objects = {str(p): p for p in local_files(names)}, set(object_files(names))
    paths: list[Path | str] = [
        local.get(str(n), str(n)) for n in names if str(n) in local or str(n) in objects
    ]
    if len(paths) != len(names) or not all(
        _plain(p, cfg.dataset, getattr(cfg, "storage_options", None)) for p in paths
    ):
        return None
    return paths


def _open(path: Path | str, storage_options: Any, **options: Any) -> Any:
    """``path`` opened for binary reading: a local file by ``open``, an object through fsspec with ``options``."""
    return open_input(str(path), storage_options, **options) if is_url(path) else open(path, "rb")


def _plain(path: Path | str, dataset: str, storage_options: Any = None) -> bool:
    """Not compressed, and (JSON) lines rather than one array: a few leading bytes, never a document."""
    if dataset == "parquet" and is_url(path):
        return True  # an object that is not parquet is named by its footer's read: no request for its head
    errors = remote_errors("load", str(path), storage_options) if is_url(path) else read_errors("load", path)
    with errors, _open(path, storage_options, block_size=4096, cache_type="none") as handle:
        head = handle.read(4096)
    if any(head.startswith(magic) for magic in _MAGIC):
        return False
    if dataset == "json":
        body = head[len(_BOM) :] if head.startswith(_BOM) else head
        return not body.lstrip().startswith(b"[")
    return True


def range_size(total_bytes: int, workers: int) -> int:
    """Bytes per range: :data:`RANGE_BYTES`, or less so that each of ``workers`` gets about four items.

    ``clean`` gets one work item per range, so an input of a few ranges would leave workers
    idle; the cut never changes the data (the partitions are canonical), only who does the work.
    Never below :data:`MIN_RANGE_BYTES` (unless :data:`RANGE_BYTES` is set lower).
    """
    share = -(-int(total_bytes) // max(1, 4 * int(workers)))
    return min(RANGE_BYTES, max(MIN_RANGE_BYTES, share))


def plan_ranges(cfg: Any, files: list[Path | str], range_bytes: int | None = None) -> list[FileRange]:
    """The ``load`` work items of ``files``, in corpus order, from their sizes (and Parquet footers).

    Args:
        cfg: the config (``dataset``, ``text_column``, ``sample_by``).
        files: what :func:`worker_files` returned.
        range_bytes: bytes per item (``None``: :data:`RANGE_BYTES`, read now so tests can lower it).
    """
    size = RANGE_BYTES if range_bytes is None else int(range_bytes)
    spans: list[tuple[str, int, int]] = []
    for path in files:
        if cfg.dataset == "parquet":
            spans.extend(
                (str(path), a, b)
                for a, b in _row_group_runs(path, size, getattr(cfg, "storage_options", None))
            )
        elif cfg.dataset == "text" and cfg.sample_by != "line":
            spans.append((str(path), 0, file_size(cfg, path)))
        else:
            total = file_size(cfg, path)
            spans.extend((str(path), a, min(a + size, total)) for a in range(0, total, size))
    column = "text" if cfg.dataset == "text" else cfg.text_column
    sample_by = getattr(cfg, "sample_by", "line") or "line"
    return [FileRange(i, path, a, b, cfg.dataset, column, sample_by) for i, (path, a, b) in enumerate(spans)]


def file_size(cfg: Any, path: Path | str) -> int:
    """``path``'s size as the config identified it (an object's from the store's metadata: no second request)."""
    known = getattr(cfg, "input_sizes", {}).get(str(path))
    if known is not None:
        return int(known)
    if not is_url(path):
        return Path(path).stat().st_size
    options = getattr(cfg, "storage_options", None)
    fs, name = url_filesystem(str(path), options)
    with remote_errors("load", str(path), options):
        return int(fs.size(name))


def _footer(path: Path | str, storage_options: Any) -> Any:
    """The Parquet footer of ``path`` (an object's: a few ranged requests, never the object); ``None``: not parquet.

    Raises:
        DataError: the store refuses or is gone (naming the object).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not is_url(path):
        try:
            return pq.read_metadata(path)
        except Exception:  # pyarrow raises several kinds for a file that is not parquet
            return None
    with (
        remote_errors("load", str(path), storage_options),
        open_input(str(path), storage_options, **PARQUET_READ) as f,
    ):
        try:
            return parquet_footer(f)
        except pa.ArrowInvalid:
            return None


def parquet_footer(handle: Any) -> Any:
    """The Parquet metadata of an open object, read in two requests of exactly its footer.

    pyarrow reads the last 64 KiB of a file for its footer, and again in each worker: on a store
    that is 64 KiB per file and per work item fetched for a few hundred bytes. Here the footer's
    length (its last 8 bytes) and then the footer itself are requested, and parsed as the footer of
    an empty Parquet file (``PAR1``, the footer, its length, ``PAR1``).

    Raises:
        pyarrow.ArrowInvalid: not a Parquet file, or one with an encrypted footer.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    size = int(handle.size)
    if size < 12:
        raise pa.ArrowInvalid("too small to be a Parquet file")
    handle.seek(size - 8)
    tail = handle.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != b"PAR1" or length > size - 12:
        raise pa.ArrowInvalid("no Parquet footer at the end of the object")
    handle.seek(size - 8 - length)
    footer = handle.read(length)
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))


def _row_group_runs(path: Path | str, size: int, storage_options: Any = None) -> list[tuple[int, int]]:
    """Runs of consecutive row groups of at most ``size`` bytes each (uncompressed, by the footer; at least one group)."""
    meta = _footer(path, storage_options)
    if meta is None:  # not parquet: one item, whose worker names the file and what is wrong
        return [(0, 1)]
    runs: list[tuple[int, int]] = []
    start, held = 0, 0
    for group in range(meta.num_row_groups):
        grown = held + meta.row_group(group).total_byte_size
        if group > start and grown > size:
            runs.append((start, group))
            start, grown = group, meta.row_group(group).total_byte_size
        held = grown
    if meta.num_row_groups > start:
        runs.append((start, meta.num_row_groups))
    return runs

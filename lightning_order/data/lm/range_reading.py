"""A worker's read of one ``load`` work item (:class:`~.file_ranges.FileRange`): the documents ``datasets`` would give.

JSON lines and text by line: the range owns every record whose first byte lies in
``[start, stop)`` (it skips to the byte after the first newline at or after ``start - 1``, and
finishes the record that holds byte ``stop - 1``), so ranges cut anywhere give every record once.
JSON lines are parsed by ``pyarrow.json`` (the parser ``datasets`` uses) with the text column's
schema given; text is decoded as ``datasets``' text builder decodes it (UTF-8, ``\\r\\n`` and
``\\r`` made ``\\n``, lines split at ``\\n`` only, line breaks kept; paragraphs split at blank
lines; a document per file). Parquet: the text column of the item's row groups.

The hostile-input checks of docs/reliability.md hold per file, here on the worker: bytes that are
not UTF-8 and a broken JSON line name the file, offset and line (:func:`~.inputs.diagnose_files`);
text values of another kind name the file and column (:func:`~.reading.text_kind_error`); a file
that ``stat`` accepted and a read refuses (a permission, an ``EIO``) names the file
(:func:`~.storage.read_error`); an object in a store (``s3://``...) is read the same way, its
byte ranges and row groups requested from the store (:func:`~.object_store.open_input`), and a
store that refuses or is gone names the object (:func:`~.object_store.object_error`, secrets
redacted). A JSON line longer than ``pyarrow.json``'s block is read with a
block that holds the whole range (as ``datasets`` grows its block), never refused. The
documents are written as an Arrow IPC file of one ``text`` column; the result holds counts only.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lightning_order.data.engine.inputs import diagnose_files
from lightning_order.data.engine.object_store import is_url, open_input, remote_errors
from lightning_order.data.engine.partitions import write_table
from lightning_order.data.engine.reading import is_text_type, text_kind_error
from lightning_order.data.engine.storage import read_errors
from lightning_order.data.lm.file_ranges import OBJECT_READ, PARQUET_READ, FileRange, parquet_footer
from lightning_order.errors import DataError

__all__ = ["range_bytes", "read_range", "read_texts"]

#: The largest block ``pyarrow.json`` takes (an ``int32``): a range holding a longer line is refused, named.
_MAX_JSON_BLOCK = (1 << 31) - 1


def read_range(item: dict[str, Any]) -> dict[str, Any]:
    """Reads one file range, checks it, writes its text column to ``out/range-<index>.arrow``.

    Item keys: ``range`` (a :class:`~.file_ranges.FileRange`), ``out`` (the folder), and
    ``storage_options`` (optional: the fsspec filesystem's keyword arguments of an object's store).

    Returns:
        ``path`` (the Arrow file), ``rows`` (including nulls), ``nulls``, ``text_bytes`` and
        ``absent`` (no row of the range names the text column: JSON lines only).

    Raises:
        DataError: the bytes are not UTF-8, a JSON line is broken, or the text values are not
            strings; each naming the file (and the offset, line or column).
    """
    fr: FileRange = item["range"]
    column, absent = read_texts(fr, item.get("storage_options"))
    out = Path(item["out"]) / f"range-{fr.index:06d}.arrow"
    write_table(pa.table({"text": column}), out)
    return {
        "path": str(out),
        "rows": len(column),
        "nulls": int(column.null_count),
        "text_bytes": int(pc.sum(pc.binary_length(column)).as_py() or 0),
        "absent": absent,
    }


def read_texts(fr: FileRange, storage_options: Mapping[str, Any] | None = None) -> tuple[pa.Array, bool]:
    """The range's text values (``large_string``, nulls kept) and whether the column was absent from it.

    Args:
        fr: the range.
        storage_options: the fsspec filesystem's keyword arguments, where ``fr.path`` is a URL.
    """
    if fr.kind == "parquet":
        return _parquet_texts(fr, storage_options)
    data = range_bytes(fr.path if is_url(fr.path) else Path(fr.path), fr.start, fr.stop, storage_options)
    if fr.kind == "json":
        return _json_texts(fr, data)
    return _text_texts(fr, data), False


def _reading(
    path: Path | str, storage_options: Mapping[str, Any] | None
) -> contextlib.AbstractContextManager[None]:
    """The block that turns a failed read of ``path`` (a file, or an object in a store) into one error naming it."""
    return remote_errors("load", str(path), storage_options) if is_url(path) else read_errors("load", path)


def _open(path: Path | str, storage_options: Mapping[str, Any] | None) -> Any:
    """``path`` opened for binary reading: a local file by ``open``, an object's ranges through fsspec."""
    return open_input(str(path), storage_options, **OBJECT_READ) if is_url(path) else open(path, "rb")


def range_bytes(
    path: Path | str, start: int, stop: int, storage_options: Mapping[str, Any] | None = None
) -> bytes:
    """The bytes of every record (a line ending in ``\\n``, or the file's last) whose first byte is in ``[start, stop)``.

    Args:
        path: a local file, or an object's URL (its bytes requested from the store, not downloaded whole).
        start, stop: the range.
        storage_options: the fsspec filesystem's keyword arguments, for a URL.

    Raises:
        DataError: the file cannot be opened or read (naming it).
    """
    with _reading(path, storage_options), _open(path, storage_options) as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # through the first newline at or after start - 1: the next record is ours
        first = handle.tell()
        if first >= stop:
            return b""
        data = handle.read(stop - first)
        if data and not data.endswith(b"\n"):
            data += handle.readline()  # the record holding byte stop - 1 started in this range
    return data


def _utf8_error(fr: FileRange, err: Exception) -> DataError:
    # an object is not read again whole to be diagnosed: the range and the parser's message name it
    diagnosis = None if is_url(fr.path) else diagnose_files([Path(fr.path)], fr.kind)
    if diagnosis is not None:
        return diagnosis
    return DataError(
        f"data file {fr.path} could not be read at bytes [{fr.start}, {fr.stop}) ({type(err).__name__}: "
        f"{str(err).splitlines()[0] if str(err) else ''}); fix the file or remove it from data_files",
        step="load",
    )


def _text_texts(fr: FileRange, data: bytes) -> pa.Array:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _utf8_error(fr, err) from err
    if "\r" in text:  # datasets opens text files with universal newlines
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if fr.sample_by == "document":
        docs = [text]
    elif fr.sample_by == "paragraph":
        docs = [p for p in text.split("\n\n") if p]
    else:
        lines = text.split("\n")
        docs = [line + "\n" for line in lines[:-1]]
        if lines[-1]:
            docs.append(lines[-1])
    return pa.array(docs, pa.large_string())


def _json_texts(fr: FileRange, data: bytes) -> tuple[pa.Array, bool]:
    import pyarrow.json as paj

    if not data.strip():
        return pa.array([], pa.large_string()), True
    options = paj.ParseOptions(
        explicit_schema=pa.schema([(fr.column, pa.large_string())]), unexpected_field_behavior="ignore"
    )
    try:
        table = _parse_json(fr, data, options)
        column = table.column(fr.column).combine_chunks()
        column.validate(full=True)  # UTF-8 of every value
    except DataError:
        raise
    except Exception as err:  # pyarrow raises several kinds; the user needs the file and the line
        kind = _json_kind(data, fr.column)
        if kind is not None:
            raise text_kind_error(fr.column, {fr.path: kind}) from err
        raise _utf8_error(fr, err) from err
    absent = column.null_count == len(column) and json.dumps(fr.column).encode() not in data
    return column, absent


def _parse_json(fr: FileRange, data: bytes, options: Any) -> pa.Table:
    """``data`` parsed by ``pyarrow.json``; a line longer than its block parsed again in one block of the whole range.

    The default block (1 MiB) is fastest for ordinary lines; a longer line is an Arrow
    "straddling object" error, not bad input (``datasets`` reads it: the docs quote 30 MB
    documents). The range is in memory already, so a block of its size costs no more memory.
    """
    import pyarrow.json as paj

    try:
        return paj.read_json(pa.BufferReader(data), parse_options=options)
    except pa.ArrowInvalid as err:
        if "straddling" not in str(err):
            raise
        if len(data) > _MAX_JSON_BLOCK:
            raise DataError(
                f"data file {fr.path} holds a JSON line in bytes [{fr.start}, {fr.stop}) longer than Arrow's "
                f"largest block (2 GiB); split that document into several lines",
                step="load",
            ) from err
    whole = paj.ReadOptions(True, len(data))  # use_threads, and a block of the whole range
    return paj.read_json(pa.BufferReader(data), read_options=whole, parse_options=options)


def _json_kind(data: bytes, column: str) -> str | None:
    """The kinds of the range's text values when any is not a string (``None``: all strings, or unreadable)."""
    kinds = set()
    for line in data.decode("utf-8", errors="replace").split("\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            return None  # a broken line: diagnose_files names it
        value = row.get(column) if isinstance(row, dict) else None
        if value is not None:
            kinds.add("string" if isinstance(value, str) else type(value).__name__)
    return None if kinds <= {"string"} else "/".join(sorted(kinds))


def _parquet_texts(fr: FileRange, storage_options: Mapping[str, Any] | None = None) -> tuple[pa.Array, bool]:
    if not is_url(fr.path):
        return _parquet_column(fr, fr.path, storage_options)
    with _reading(fr.path, storage_options):
        source = open_input(fr.path, storage_options, **PARQUET_READ)
    with source:  # pyarrow reads the footer and the column's chunks by ranged requests
        return _parquet_column(fr, source, storage_options)


def _parquet_column(
    fr: FileRange, source: Any, storage_options: Mapping[str, Any] | None
) -> tuple[pa.Array, bool]:
    import pyarrow.parquet as pq

    try:
        with _reading(fr.path, storage_options):
            try:
                # an object's footer read exactly (two small requests), not pyarrow's last 64 KiB
                metadata = parquet_footer(source) if is_url(fr.path) else None
                handle = pq.ParquetFile(source, metadata=metadata)
            except pa.ArrowInvalid as err:  # not parquet (a store's failure is no ArrowInvalid)
                raise _utf8_error(fr, err) from err
    except DataError:
        raise
    except Exception as err:  # not parquet: diagnose_files names what is wrong
        raise _utf8_error(fr, err) from err
    schema = handle.schema_arrow
    kind = schema.field(fr.column).type if fr.column in schema.names else pa.null()
    if pa.types.is_null(kind):  # absent, or no value in the file: nulls, as datasets reads them
        rows = sum(handle.metadata.row_group(g).num_rows for g in range(fr.start, fr.stop))
        return pa.nulls(rows, pa.large_string()), fr.column not in schema.names
    if not is_text_type(kind):
        raise text_kind_error(fr.column, {fr.path: str(kind)})
    with _reading(fr.path, storage_options):
        table = handle.read_row_groups(list(range(fr.start, fr.stop)), columns=[fr.column])
    # a dictionary of strings (pandas categoricals, Spark) is decoded: datasets reads it as text
    column = table.column(fr.column).combine_chunks().cast(pa.large_string())
    try:
        column.validate(full=True)  # Arrow does not check UTF-8 when it reads parquet strings
    except pa.ArrowInvalid as err:
        raise DataError(
            f"data file {fr.path} holds text that is not UTF-8 in column {fr.column!r} (row groups "
            f"{fr.start} to {fr.stop - 1}): expected UTF-8 text; re-encode the column",
            step="load",
            column=fr.column,
        ) from err
    return column, False

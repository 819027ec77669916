"""Reading the input through :func:`datasets.load_dataset`, behind errors that name the file and the fix.

Both pipelines load their files here: the files read are the expanded ``data_files`` the cache
key identified, checked again after they are read (one that changed since the DataModule was
built, or while it was read, is refused: the cache would otherwise hold data its key does not
name). A file ``datasets`` cannot read is explained by :func:`~.inputs.diagnose_files` (no rows,
a header only, not UTF-8).

Each file is hashed once here, after the read, not also before it: the file's status (device,
inode, size, mtime and ctime) taken before the read and again after the hash proves that no
write happened in between (the kernel sets ctime on every write, and no call sets it back), so
the bytes hashed are the bytes ``datasets`` read. A file whose ctime is within
:data:`_RECENT_NS` of the first status is hashed before the read as well (two writes in one
tick of a coarse clock can leave ctime as it was).

An object in a store (``s3://``...) has no status: its identity is checked before the read and
again after it, so an object rewritten while it was read is refused as a local file is. Each
check asks the store for its metadata (ETag, size, version: one ``HEAD``), which names the digest
recorded when it was identified (:func:`~.input_digests.object_digest`): no byte is read again
unless the object changed, and then its new bytes are hashed and differ.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lightning_order.data.engine.inputs import (
    diagnose_files,
    file_names,
    flat_entries,
    local_files,
    object_files,
)
from lightning_order.data.engine.object_store import object_error
from lightning_order.data.engine.storage import read_error, storage_error
from lightning_order.errors import DataError

if TYPE_CHECKING:  # datasets is imported when rows are loaded (a cache hit needs none)
    import datasets

__all__ = [
    "check_text_kinds",
    "checked_read",
    "csv_delimiter",
    "is_text_type",
    "load_files",
    "text_kind_error",
]

_T = TypeVar("_T")

#: Rows of a json file (and at most a megabyte of a csv) whose text values are sniffed for their kind.
_SNIFF_ROWS = 1000
#: A file whose ctime is this close to now is also hashed before it is read (a coarse clock's tick, with margin).
_RECENT_NS = 1_000_000_000


def _check_utf8(data: datasets.Dataset) -> None:
    """Raises ``ArrowInvalid`` when a text column holds bytes that are not UTF-8.

    ``datasets``' JSON reader stores such bytes as they are; Python fails on them much later, in a
    worker, with a raw ``UnicodeDecodeError``. One pass over the text here names the file instead.
    The pass reads the dataset's Arrow files one record batch at a time (plain reads, not its
    memory map): touching every page of the map would keep the whole corpus resident in this
    process until the dataset is dropped.
    """
    import pyarrow as pa

    files = [entry["filename"] for entry in data.cache_files]
    if not files or data._indices is not None:
        _validate_text(data.data.table)
        return
    for path in files:
        with pa.OSFile(path) as source:
            for batch in pa.ipc.open_stream(source):
                _validate_text(batch)


def _validate_text(table: Any) -> None:
    for name, kind in zip(table.schema.names, table.schema.types):
        if str(kind) in ("string", "large_string"):
            table.column(name).validate(full=True)


def _changed(files: list[Path | str], when: str) -> DataError:
    return DataError(
        f"a data file changed {when} (the cache key names the old content): "
        f"{', '.join(map(str, files))}; build the DataModule again once the files stay as they are",
        step="load",
    )


def _identity_now(cfg: Any) -> Any:
    """The config's input identity computed again (a recorded digest where nothing was written; objects: metadata)."""
    return cfg.identify_inputs()


def _changed_files(cfg: Any, now: Any) -> list[Path | str]:
    """The identified files whose identity ``now`` differs from the config's (every file when the lists differ).

    An identity names no file (it is the content's), so the entries are matched to the files by
    their place in the list.
    """
    files: list[Path | str] = [*local_files(cfg.identified_files), *object_files(cfg.identified_files)]
    names, old, new = (
        file_names(cfg.identified_files),
        flat_entries(cfg.input_identity),
        flat_entries(now),
    )
    if not len(names) == len(old) == len(new):
        return files
    moved = {name for name, a, b in zip(names, old, new) if a != b}
    return [f for f in files if str(f) in moved] or files


def _check_identity(cfg: Any, when: str) -> None:
    if not local_files(cfg.identified_files) and not object_files(cfg.identified_files):
        return
    now = _identity_now(cfg)
    if now != cfg.input_identity:
        raise _changed(_changed_files(cfg, now), when)


def _statuses(files: list[Path]) -> list[tuple[int, ...]]:
    """What changes with every write to each file: device, inode, size, mtime and ctime (ns); ``()`` once it is gone."""
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append(())
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return out


def _check_before(cfg: Any) -> list[tuple[int, ...]]:
    """The files' statuses before the read; the identity checked now too where ctime alone cannot prove it later.

    By size and mtime (``input_hash="size_mtime"``) the check is the statuses themselves, as cheap
    now as later; by content, only a file written within :data:`_RECENT_NS` is hashed now.
    """
    files = local_files(cfg.identified_files)
    statuses = _statuses(files)
    now = time.time_ns()
    # An object's identity is its metadata (one HEAD request each): as cheap to check now as later.
    recent = any(not status or now - status[-1] < _RECENT_NS for status in statuses)
    if cfg.input_hash != "content" or recent or object_files(cfg.identified_files):
        _check_identity(cfg, "after the DataModule was built")
    return statuses


def _check_after(cfg: Any, before: list[tuple[int, ...]]) -> None:
    """Refuses a file whose content is not the identified one, or that was written while it was read.

    The one hash of each file: equal to the identity, and no write between the status taken
    before the read and the one taken after the hash, so the bytes read are the bytes hashed.
    """
    files = local_files(cfg.identified_files)
    objects = object_files(cfg.identified_files)
    if not files and not objects:
        return
    now = _identity_now(cfg)
    written = _statuses(files) != before
    if written or now != cfg.input_identity:
        # An object's identity was checked before the read: a different one now changed while it was read.
        while_read = written or bool(objects)
        changed = files if written else _changed_files(cfg, now)
        raise _changed(changed, "while it was read" if while_read else "after the DataModule was built")


def checked_read(cfg: Any, read: Callable[[], _T]) -> _T:
    """``read()`` between the identity checks ``load_files`` makes: statuses before, one hash after.

    For a read that does not go through ``datasets`` (workers reading their own ranges): a file
    that changed since the DataModule was built, or while it was read, is refused the same way.

    Raises:
        DataError: a data file changed before or while it was read.
    """
    before = _check_before(cfg)
    result = read()
    _check_after(cfg, before)
    return result


def csv_delimiter(files: list[Path], options: Mapping[str, Any]) -> dict[str, Any]:
    """``{"sep": "\\t"}`` when every file of a csv dataset is a ``.tsv``, ``{}`` otherwise.

    ``datasets``' csv builder splits every file at commas, so a tab-separated file would load as
    one column named after its whole header line. A mix of ``.tsv`` and other files cannot share
    one delimiter and is refused; a ``sep`` or ``delimiter`` the user passes wins.
    """
    if "sep" in options or "delimiter" in options or not files:
        return {}
    tabbed = [f.suffix.lower() == ".tsv" for f in files]
    if all(tabbed):
        return {"sep": "\t"}
    if any(tabbed):
        raise DataError(
            "data_files mixes tab-separated (.tsv) and comma-separated files, which dataset='csv' reads "
            f"with one delimiter: {', '.join(str(f) for f, t in zip(files, tabbed) if t)} are .tsv; "
            "convert them to one kind, or prepare each kind as its own dataset",
            step="load",
        )
    return {}


def load_files(cfg: Any, hf_cache: Path | None, **options: Any) -> datasets.Dataset:
    """``datasets.load_dataset`` of a config's ``dataset``, ``data_files`` and split, checked before and after.

    Args:
        cfg: a pipeline config (``dataset``, ``dataset_config``, ``load_split``, the expanded
            ``input_files`` and their ``input_identity``).
        hf_cache: the ``datasets`` cache folder for this preparation (``None``: datasets' own).
        **options: passed on to ``load_dataset`` (e.g. ``sample_by`` for text files).

    Raises:
        DataError: every file is empty, a file changed before or while it was read, or
            ``datasets`` cannot read the input (the file and what is wrong with it, when known).
    """
    files = local_files(cfg.input_files)
    if files and all(f.stat().st_size == 0 for f in files):
        raise DataError(
            f"the dataset is empty: every data file is empty ({', '.join(map(str, files))})", step="load"
        )
    before = _check_before(cfg)
    check_text_kinds(cfg)
    import datasets

    if cfg.dataset == "csv":
        options = {**csv_delimiter(files, options), **options}
    if cfg.dataset == "parquet" and "fragment_scan_options" not in options:
        import pyarrow.dataset as ds

        # Row group by row group: with Arrow's pre-buffering, reads of earlier row groups stay
        # alive, and the memory of the load grows with the file (600 MB for 1 GB of text; 300 without).
        options["fragment_scan_options"] = ds.ParquetFragmentScanOptions(pre_buffer=False)
    if object_files(cfg.input_files) and getattr(cfg, "storage_options", None) is not None:
        options.setdefault("storage_options", dict(cfg.storage_options))
    try:
        data = datasets.load_dataset(
            cfg.dataset,
            name=cfg.dataset_config,
            data_files=cfg.input_files,
            split=cfg.load_split,
            cache_dir=None if hf_cache is None else str(hf_cache),
            **options,
        )
        _check_utf8(data)
    except (DataError, KeyboardInterrupt):
        raise
    except Exception as err:  # datasets raises many kinds; the user needs the step and the input
        full = storage_error(err, "load", hf_cache)  # a full disk is not a bad input
        if full is not None:
            raise full from err
        unreadable = _unreadable_input(err, files)
        if unreadable is not None:
            raise unreadable from err
        diagnosis = diagnose_files(files, cfg.dataset)
        if diagnosis is not None:
            raise diagnosis from err
        objects = object_files(cfg.input_files)
        if objects:  # the store's error may quote a signed request: named, redacted, in one line
            raise object_error(
                err,
                objects[0] if len(objects) == 1 else str(cfg.data_files),
                "load",
                getattr(cfg, "storage_options", None),
            ) from err
        raise DataError(
            f"could not load dataset={cfg.dataset!r} data_files={cfg.data_files!r}: "
            f"{type(err).__name__}: {err}; check the name, the files and load_split={cfg.load_split!r}",
            step="load",
        ) from err
    _check_after(cfg, before)
    return data


def _unreadable_input(error: BaseException, files: list[Path]) -> DataError | None:
    """An ``OSError`` in ``error``'s chain that names one of the input ``files``, as the error naming it.

    ``datasets`` wraps what its reader raised; an ``OSError`` naming no file (an ``EIO`` from a
    read) is left to :func:`~.inputs.diagnose_files`, whose own read of each file names the one
    that fails again.
    """
    inputs = {os.path.abspath(f): f for f in files}
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.filename is not None:
            name = os.path.abspath(os.fsdecode(cause.filename))
            if name in inputs:
                return read_error(cause, inputs[name], "load")
        cause = cause.__cause__ or cause.__context__
    return None


def check_text_kinds(cfg: Any) -> None:
    """Refuses input files whose text values are of different kinds (``"a"`` in one, ``5`` in another).

    ``datasets`` casts every file to the first one's schema, so numbers silently became
    documents ``"0"``..``"149"``. The kind of ``cfg.text_column`` in each csv/tsv, json or parquet
    file is read from its first rows (its schema, for parquet) and compared.

    Raises:
        DataError: a file's text values are not strings, naming each file and its kind.
    """
    files = local_files(cfg.input_files)
    if cfg.dataset not in ("json", "parquet", "csv") or not files:
        return
    kinds = {str(path): _text_kind(path, cfg.dataset, cfg.text_column) for path in files}
    found = {k for k in kinds.values() if k is not None}
    if len(found) > 1 or (found and found != {"string"}):
        raise text_kind_error(cfg.text_column, kinds)


def text_kind_error(column: str, kinds: Mapping[str, str | None]) -> DataError:
    """The error for text values that are not all strings: each file (``path -> kind``) and its kind named."""
    listed = "; ".join(f"{path}: {kind}" for path, kind in kinds.items() if kind is not None)
    return DataError(
        f"the text column {column!r} holds values of different kinds across the files ({listed}): "
        "expected text in every file; numbers would silently become documents. Fix or remove the files "
        "whose values are not strings",
        step="load",
        column=column,
    )


def _text_kind(path: Path, dataset: str, column: str) -> str | None:
    """``"string"``, another kind's name, or ``None`` (the column is absent or only null in the first rows)."""
    try:
        if dataset == "parquet":
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            return _kind_of(schema.field(column).type) if column in schema.names else None
        if dataset == "csv":
            return _csv_kind(path, column)
        return _json_kind(path, column)
    except OSError:
        return None


def is_text_type(kind: Any) -> bool:
    """Whether Arrow type ``kind`` holds text: ``string``, ``large_string``, or a dictionary of either.

    Parquet files written from pandas categoricals or by Spark store repeated strings
    dictionary-encoded; ``datasets`` reads them as plain strings, and so do we.
    """
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _kind_of(field: Any) -> str | None:
    import pyarrow as pa

    if pa.types.is_null(field) or pa.types.is_binary(field) or pa.types.is_large_binary(field):
        return None  # nothing yet, or bytes that are not UTF-8 (diagnose_files names the byte)
    return "string" if is_text_type(field) else str(field)


def _csv_kind(path: Path, column: str) -> str | None:
    """The kind Arrow infers for ``column`` from the first megabyte of a csv (tsv: tab-separated) file."""
    import pyarrow as pa
    import pyarrow.csv as pv

    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    try:
        reader = pv.open_csv(
            path,
            read_options=pv.ReadOptions(block_size=1 << 20),
            parse_options=pv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
            convert_options=pv.ConvertOptions(include_columns=[column]),
        )
        batch = reader.read_next_batch()
    except (pa.ArrowException, StopIteration):
        return None  # a missing column or a file Arrow cannot parse: load explains it
    return _kind_of(batch.schema.field(column).type)


def _json_kind(path: Path, column: str) -> str | None:
    import json

    kinds = set()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            if number >= _SNIFF_ROWS:
                break
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                return None  # a json array file or a broken line: datasets explains it
            value = row.get(column) if isinstance(row, dict) else None
            if value is not None:
                kinds.add("string" if isinstance(value, str) else type(value).__name__)
    return None if not kinds else ("string" if kinds == {"string"} else "/".join(sorted(kinds)))

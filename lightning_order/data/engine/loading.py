"""Reading the input through :func:`datasets.load_dataset`, behind errors that name the file and the fix.

Both pipelines load their files here: the files read are the expanded ``data_files`` the cache
key identified, checked again before they are read (one that changed since the DataModule was
built is refused) and after (one rewritten while it was read is refused: the cache would
otherwise hold data its key does not name). A file ``datasets`` cannot read is explained by
:func:`~.inputs.diagnose_files` (no rows, a header only, not UTF-8).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine.inputs import diagnose_files, files_identity, local_files
from lightning_order.data.engine.storage import storage_error
from lightning_order.errors import DataError

if TYPE_CHECKING:  # datasets is imported when rows are loaded (a cache hit needs none)
    import datasets

__all__ = ["load_files"]


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


def _check_identity(cfg: Any, files: list[Path], when: str) -> None:
    if files and files_identity(cfg.input_files, cfg.input_hash) != cfg.input_identity:
        raise DataError(
            f"a data file changed {when} (the cache key names the old content): "
            f"{', '.join(map(str, files))}; build the DataModule again once the files stay as they are",
            step="load",
        )


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
    _check_identity(cfg, files, "after the DataModule was built")
    import datasets

    if cfg.dataset == "parquet" and "fragment_scan_options" not in options:
        import pyarrow.dataset as ds

        # Row group by row group: with Arrow's pre-buffering, reads of earlier row groups stay
        # alive, and the memory of the load grows with the file (600 MB for 1 GB of text; 300 without).
        options["fragment_scan_options"] = ds.ParquetFragmentScanOptions(pre_buffer=False)
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
        diagnosis = diagnose_files(files, cfg.dataset)
        if diagnosis is not None:
            raise diagnosis from err
        raise DataError(
            f"could not load dataset={cfg.dataset!r} data_files={cfg.data_files!r}: "
            f"{type(err).__name__}: {err}; check the name, the files and load_split={cfg.load_split!r}",
            step="load",
        ) from err
    _check_identity(cfg, files, "while it was read")
    return data

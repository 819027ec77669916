"""The input files: what will be read (globs and folders expanded), its identity, and why it cannot be read.

:func:`expand_data_files` replaces every glob and folder in ``data_files`` by the sorted list of
the files it names, so the files ``load`` reads are exactly the files that were identified: each
regular file once (resolved; a ``**`` walks every folder once, so a link loop is cut), ``~`` and
``$VAR`` expanded (an unset variable refused, never kept as a literal folder name), and nothing
read that was not named (a file builder without ``data_files`` is refused).
:func:`files_identity` identifies each of them by its content, never by its location (size and
xxh3 of the bytes, the default: a file rewritten with the same size and mtime still changes the
cache key, and one corpus in two folders or in a store has one key; an object is read once per
version on a machine) or, with ``input_hash="size_mtime"``, by metadata only (size and
modification time, an object's size, ETag and version: for very large inputs, where reading
every byte costs too much; a local rewrite that keeps size and mtime is then not seen).
:func:`diagnose_files` explains, when ``datasets`` cannot read them, which file is wrong and how:
a parquet file with no rows, a csv with a header only, a text file that is not UTF-8 or unreadable.
"""

from __future__ import annotations

import codecs
import difflib
import fnmatch
import glob
import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from lightning_order.data.engine.input_digests import input_digest, object_digest
from lightning_order.data.engine.object_store import is_url, object_identity, remote_errors, url_filesystem
from lightning_order.data.engine.progress import track
from lightning_order.data.engine.storage import read_error
from lightning_order.errors import DataError

__all__ = [
    "LOCAL_DATASET",
    "OBJECT_THREADS",
    "READ_BY_NAME",
    "InputHash",
    "check_dataset_name",
    "check_files_named",
    "diagnose_files",
    "expand_data_files",
    "file_names",
    "files_identity",
    "flat_entries",
    "local_files",
    "object_files",
]

#: How input files are identified: by their bytes (``"content"``) or by size and mtime.
InputHash = Literal["content", "size_mtime"]
#: The file endings each packaged ``datasets`` builder reads from a folder.
_SUFFIXES = {
    "csv": (".csv", ".tsv"),
    "json": (".json", ".jsonl"),
    "parquet": (".parquet",),
    "text": (".txt",),
    "arrow": (".arrow",),
}
_TEXT_BUILDERS = ("csv", "json", "text")
#: Name endings that decide how a file's bytes are read (``datasets`` decompresses by the name; a
#: csv dataset's ``.tsv`` files are cut at tabs, :func:`~.reading.csv_delimiter`): with the location
#: out of the key, a file's identity keeps such an ending, so ``a.tsv`` and ``a.csv`` of the same bytes differ.
READ_BY_NAME = frozenset({".tsv", ".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip"})
#: What the cache key holds for ``dataset`` when it is a local path: its files (and their names in it) identify it.
LOCAL_DATASET = "<local dataset folder>"
#: Objects identified at once (their reads and ``HEAD`` requests wait on the network).
OBJECT_THREADS = 8
_CHUNK = 1 << 22
#: A ``$NAME`` or ``${NAME}`` left in a path after :func:`os.path.expandvars`: a variable that is not set.
_UNSET_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def _is_remote(name: str) -> bool:
    return "://" in name


def _is_object(name: str) -> bool:
    """Whether ``name`` is an object in a store we read through fsspec (``s3://``, ``gs://``, ``memory://``...).

    ``hf://`` and ``http(s)://`` names stay ``datasets``' to resolve (a hub revision, a web page):
    they are identified by name, as before.
    """
    return is_url(name) and name.split("://", 1)[0].lower() not in ("hf", "http", "https")


def _exists(name: str) -> bool:
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a name too long, an unknown ~user
        return False


def _packaged_builders() -> set[str]:
    """The builders ``datasets`` ships (csv, json, parquet, text, arrow, imagefolder...)."""
    try:  # datasets' own table of its packaged builders; the common ones if it moves
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:
        return set(_SUFFIXES)
    return set(_PACKAGED_DATASETS_MODULES) | set(_SUFFIXES)


def _in_local_cache(name: str) -> bool:
    """Whether hub dataset ``name`` was downloaded to this machine (the hub's or datasets' cache)."""
    import datasets.config
    import huggingface_hub.constants

    hub = Path(huggingface_hub.constants.HF_HUB_CACHE) / f"datasets--{name.replace('/', '--')}"
    prepared = Path(datasets.config.HF_DATASETS_CACHE) / name.replace("/", "___")
    try:
        return hub.is_dir() or prepared.is_dir()
    except OSError:  # a name no file system takes (too long): in no cache
        return False


def check_dataset_name(dataset: str | None) -> None:
    """Refuses, before anything is loaded, a ``dataset`` that ``load`` could only look up on the hub.

    ``datasets.load_dataset`` asks the Hugging Face hub for any name it does not know, and a typo
    (``"txt"``) waits there for half a minute of retries before its error. Accepted: ``None`` (the
    pipeline's built-in corpus), a builder ``datasets`` ships (``"text"``, ``"csv"``, ``"json"``,
    ``"parquet"``, ``"arrow"``...), a local path (a dataset folder or script), a remote URL, and a
    hub name already in the local Hugging Face cache.

    Raises:
        DataError: any other name, with the nearest builder and the way to use a hub dataset.
    """
    if dataset is None or dataset in _SUFFIXES or _is_remote(dataset) or _exists(dataset):
        return
    builders = _packaged_builders()
    if dataset in builders or _in_local_cache(dataset):
        return
    close = difflib.get_close_matches(dataset, sorted(builders), n=1)
    hint = f"did you mean dataset={close[0]!r}? " if close else ""
    raise DataError(
        f"dataset={dataset!r} is neither a datasets builder ({', '.join(_SUFFIXES)}...), nor a local path, nor a "
        f"hub dataset in the local Hugging Face cache: {hint}for files, name their builder and pass them, e.g. "
        "dataset='text' data_files='corpus/*.txt' (--data.dataset text --data.data_files 'corpus/*.txt'); for a "
        "hub dataset, download it once (`huggingface-cli download --repo-type dataset OWNER/NAME --local-dir "
        "data/NAME`) and pass its folder, dataset='data/NAME'",
        step="load",
    )


def expand_path(value: str | os.PathLike[str], name: str, step: str) -> str:
    """``value`` with ``~`` and ``$VAR`` / ``${VAR}`` expanded, never kept literally.

    Without this, ``cache_dir='$SCRATCH/x'`` made a folder named ``$SCRATCH`` in the working
    directory. A literal path that exists is kept as it is (a file may be named with a ``$``).

    Raises:
        DataError: the path names an environment variable that is not set.
    """
    text = os.fspath(value)
    if _is_remote(text) or _exists_literally(text):
        return text
    expanded = os.path.expanduser(os.path.expandvars(text))
    unset = _UNSET_VARIABLE.search(expanded)
    if unset:
        raise DataError(
            f"{name}={text!r} names the environment variable {unset.group(0)}, which is not set: the path "
            f"would be taken literally; set it (export {unset.group(1).strip('{}')}=...) or write the path out",
            step=step,
        )
    return expanded


def _exists_literally(text: str) -> bool:
    try:
        return "$" in text and Path(text).exists()
    except (OSError, ValueError):
        return False


def check_files_named(dataset: str | None, data_files: Any) -> None:
    """Refuses a file-format builder (``text``, ``csv``, ``json``, ``parquet``, ``arrow``) with no ``data_files``.

    ``datasets.load_dataset("text")`` with no files reads every file under the working directory,
    recursively (scripts, ``.env``, binaries), and the cache key would identify none of them.

    Raises:
        DataError: ``dataset`` is a file-format builder and ``data_files`` is empty.
    """
    if dataset in _SUFFIXES and not data_files:
        raise DataError(
            f"dataset={dataset!r} reads the files named by data_files, and none is given (it would read every "
            f"file under the working directory {Path.cwd()}): pass them, e.g. data_files='corpus/*"
            f"{_SUFFIXES[dataset][0]}' (--data.data_files 'corpus/*{_SUFFIXES[dataset][0]}')",
            step="load",
        )


def _unique(paths: Iterable[Path]) -> list[str]:
    """The resolved, sorted, distinct regular files among ``paths`` (a file reached twice, by a link or a loop, once)."""
    return sorted({str(p.resolve()) for p in paths if p.is_file()})


def _expand_one(
    name: str | os.PathLike[str], dataset: str | None, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    text = os.fspath(name)
    if _is_object(text):
        return _expand_url(text, dataset, storage_options)
    if _is_remote(text):
        return [text]
    path = Path(expand_path(text, "data_files", "load"))
    suffixes = _SUFFIXES.get(dataset or "")
    if path.is_dir():
        files = _unique(
            p
            for p in path.rglob("*")
            if not any(part.startswith(".") for part in p.relative_to(path).parts)
            and (suffixes is None or p.name.lower().endswith(suffixes))
        )
        if not files:
            wanted = f"{'/'.join(suffixes)} files" if suffixes else "files"
            raise DataError(
                f"data_files names the folder {path}, which holds no {wanted}: expected a file, a glob "
                f"(e.g. '{path}/*{suffixes[0] if suffixes else '.csv'}') or a folder of {wanted}",
                step="load",
            )
        return files
    if glob.has_magic(str(path)):
        files = _unique(Path(p) for p in _glob_once(str(path)))
        if not files and suffixes is None:
            return [text]  # e.g. a pattern inside a hub repository: datasets resolves it there
        if not files:
            raise DataError(
                f"the data_files pattern {text!r} matches no file (from {Path.cwd()}): expected at least one; "
                "check the pattern and the working folder",
                step="load",
            )
        return files
    if path.exists() and not path.is_file():  # a FIFO or a device: no identity, maybe no end
        raise DataError(
            f"data_files names {path}, which is not a regular file (a pipe, socket or device): its content cannot "
            "be identified for the cache key; copy it to a file and pass that",
            step="load",
        )
    return [str(path.resolve()) if path.exists() else text]


def expand_data_files(
    data_files: Any, dataset: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> Any:
    """``data_files`` with every glob and folder replaced by the sorted files it names.

    Args:
        data_files: a path, a list of paths, or a dict of split -> path(s) (as
            :func:`datasets.load_dataset` takes them); object-store URLs (``s3://``...) are
            expanded through fsspec as local paths are; ``hf://`` and ``http(s)://`` are kept.
        dataset: the builder (``"csv"``, ``"json"``, ``"parquet"``, ``"text"``...): a folder
            contributes the files with its endings (every file for other builders).
        storage_options: the fsspec filesystem's keyword arguments for URLs (``None``: the
            environment's, e.g. ``AWS_ENDPOINT_URL``).

    Returns:
        ``None``, a list of paths, or a dict of split -> list of paths.

    Raises:
        DataError: a folder holds no file the builder reads, or a glob matches nothing.
    """
    if data_files is None:
        return None
    if isinstance(data_files, dict):
        return {str(k): expand_data_files(v, dataset, storage_options) for k, v in sorted(data_files.items())}
    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    # A file named twice (two overlapping globs) is read once, where it is first named.
    return list(dict.fromkeys(f for name in data_files for f in _expand_one(name, dataset, storage_options)))


def _expand_url(url: str, dataset: str | None, storage_options: Mapping[str, Any] | None) -> list[str]:
    """The objects an object-store URL names: itself, every object under a prefix, or a glob's matches (sorted).

    Raises:
        DataError: the store cannot be listed (naming the URL), or a prefix or glob names no object.
    """
    fs, path = url_filesystem(url, storage_options)
    suffixes = _SUFFIXES.get(dataset or "")
    with remote_errors("load", url, storage_options):
        fs.invalidate_cache()  # listings fsspec cached earlier in this process miss objects written since
        if glob.has_magic(path):
            found = fs.glob(path, detail=True)
            kind = "pattern"
        elif fs.isdir(path):
            found = fs.find(path, detail=True)
            found = {k: v for k, v in found.items() if suffixes is None or k.lower().endswith(suffixes)}
            kind = "prefix"
        else:
            return [url]
    objects = sorted(
        name for name, info in found.items() if info.get("type") != "directory" and not _hidden(name, path)
    )
    if not objects:
        wanted = f"{'/'.join(suffixes)} objects" if suffixes else "objects"
        raise DataError(
            f"the data_files {kind} {url!r} matches no {wanted}: expected at least one; check the bucket, "
            "the prefix and the pattern",
            step="load",
        )
    return [fs.unstrip_protocol(name) for name in objects]


def _hidden(name: str, root: str) -> bool:
    """Whether an object's key below the listed ``root`` has a part starting with ``.`` (skipped, as local files)."""
    fixed = root.split("*", 1)[0].rsplit("/", 1)[0]
    below = name[len(fixed) :] if name.startswith(fixed) else name
    return any(part.startswith(".") for part in below.split("/") if part)


def _glob_once(pattern: str) -> Iterable[str]:
    """The paths ``pattern`` matches, a ``**`` never descending into a folder it has already walked.

    :func:`glob.glob` follows links to folders, so a link loop under ``**`` made every file appear
    once per level of the loop (about 41 times, until the OS refused the path). Here the folders
    below the fixed part of the pattern are walked once each (by their resolved path), and each
    path is matched against the pattern.
    """
    if "**" not in pattern:
        return glob.glob(pattern)
    parts = Path(pattern).parts
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    seen: set[str] = set()
    found = []
    for folder, subfolders, names in os.walk(Path(*parts[:fixed]) if fixed else Path("."), followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders[:] = []  # a loop, or a second link to a folder already walked
            continue
        seen.add(real)
        found += [p for n in names if _matches(parts, Path(p := os.path.join(folder, n)).parts)]
    return found


def _matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether ``path`` matches ``pattern`` part by part as :func:`glob.glob` does (``**``: any folders, hidden ones not)."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return _matches(rest, path) or (
            bool(path) and not path[0].startswith(".") and _matches(pattern, path[1:])
        )
    if not path or (path[0].startswith(".") and not head.startswith(".") and glob.has_magic(head)):
        return False
    return fnmatch.fnmatchcase(path[0], head) and _matches(rest, path[1:])


def flat_entries(files: Any) -> list[Any]:
    """``files`` (or their identity: a list, or a dict of lists by split) as one list, in order."""
    if files is None:
        return []
    if isinstance(files, dict):
        return [f for v in files.values() for f in flat_entries(v)]
    return list(files)


def files_identity(
    files: Any, mode: InputHash = "content", storage_options: Mapping[str, Any] | None = None
) -> Any:
    """The identity of expanded ``files``, by what they hold and never by where they are.

    With ``"content"`` (the default) each file or object is ``[size, "xxh3:<128-bit hex>"]``, the
    xxh3 of its bytes: a corpus read from two local folders or from a store (``s3://``...) has one
    identity, so one cache key. A local file this machine hashed before and no process wrote since
    is not read again (:func:`~.input_digests.input_digest`); an object is read once per version
    (URL, ETag, size, VersionId) on a machine (:func:`~.input_digests.object_digest`), later
    identifications ask its metadata only. Objects are identified :data:`OBJECT_THREADS` at a time.

    With ``"size_mtime"`` (metadata only, for very large corpora) a local file is
    ``[size, mtime_ns, path]`` (without its bytes, its place still tells two files apart) and an
    object ``[size, ETag, VersionId]`` (no byte read; an overwrite changes the ETag, which the
    store derives from the content): a local copy and the objects then have different identities,
    so different cache keys.

    An entry ends with the file's name ending where that ending decides how its bytes are read
    (:data:`READ_BY_NAME`: ``.tsv``, ``.gz``...), e.g. ``[size, "xxh3:...", ".tsv"]``.
    ``hf://``, ``http(s)://`` or missing paths are identified by their name only (``[name]``).
    The structure of ``files`` is kept: a list in its order, a dict by split name.
    """
    if files is None:
        return None
    objects = _objects_identity(list(dict.fromkeys(object_files(files))), mode, storage_options)
    return _identity(files, mode, objects)


def _identity(files: Any, mode: InputHash, objects: Mapping[str, list[Any]]) -> Any:
    if isinstance(files, dict):
        return {k: _identity(v, mode, objects) for k, v in files.items()}
    out = []
    for name in files:
        path = Path(name)
        if name in objects:
            entry = objects[name]
        elif _is_remote(name) or not path.is_file():
            entry = [name]
        elif mode == "content":
            entry = [path.stat().st_size, f"xxh3:{input_digest(path)}"]
        else:
            info = path.stat()
            # no byte is seen: the path still tells apart two folders whose files share size and mtime
            # (a reproducible archive's fixed mtime), as it did before the key came to be content-only
            entry = [info.st_size, info.st_mtime_ns, name]
        ending = PurePosixPath(name).suffix.lower()
        out.append([*entry, ending] if ending in READ_BY_NAME and len(entry) > 1 else entry)
    return out


def _object_entry(url: str, mode: InputHash, storage_options: Mapping[str, Any] | None) -> list[Any]:
    identity = object_identity(url, storage_options)  # [url, size, content, version]: one HEAD
    if mode == "size_mtime":
        return identity[1:]
    return [identity[1], f"xxh3:{object_digest(identity, storage_options)}"]


def _objects_identity(
    urls: list[str], mode: InputHash, storage_options: Mapping[str, Any] | None
) -> dict[str, list[Any]]:
    """Each object's identity entry; several at once, since each waits on the store, not on this machine."""
    if len(urls) <= 1:
        return {url: _object_entry(url, mode, storage_options) for url in urls}
    pool = ThreadPoolExecutor(min(OBJECT_THREADS, len(urls)), thread_name_prefix="lightning_order-identify")
    try:
        futures = {pool.submit(_object_entry, url, mode, storage_options): url for url in urls}
        for done in track(as_completed(futures), desc="identifying input objects", total=len(futures)):
            done.result()  # the first object that fails is named at once
        return {url: future.result() for future, url in futures.items()}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a failed object stops the ones not started


def file_names(files: Any) -> list[str]:
    """The expanded ``files`` as one list of names, in the order :func:`files_identity` lists their entries."""
    return [str(f) for f in flat_entries(files)]


def local_files(files: Any) -> list[Path]:
    """The expanded files that exist on this machine."""
    return [Path(f) for f in flat_entries(files) if not _is_remote(f) and Path(f).is_file()]


def object_files(files: Any) -> list[str]:
    """The expanded files that are objects in a store (``s3://``, ``gs://``, ``memory://``...), as URLs."""
    return [f for f in flat_entries(files) if _is_object(f)]


def diagnose_files(files: Iterable[Path], dataset: str | None) -> DataError | None:
    """The first input file that cannot give rows, explained; ``None`` when none is found wrong.

    Checks, per file: empty (0 bytes); a parquet file with 0 rows; a csv with a header and no
    row; a csv, json or text file that is not UTF-8 (the byte, its offset and line); a JSON
    lines file with a line that is not JSON (its line number and the parser's message); unreadable.
    """
    for path in files:
        try:
            problem = _file_problem(path, dataset)
        except OSError as err:  # stat accepted it, a read refuses (a permission, an EIO)
            return read_error(err, path, "load")
        if problem:
            return DataError(f"data file {path} {problem}", step="load")
    return None


def _file_problem(path: Path, dataset: str | None) -> str | None:
    if path.stat().st_size == 0:
        return "is empty (0 bytes): expected rows; remove it or fill it"
    if dataset == "parquet" or path.suffix == ".parquet":
        return _parquet_problem(path)
    problem = _utf8_problem(path) if dataset in _TEXT_BUILDERS else None
    problem = problem or (_header_only(path) if dataset == "csv" else None)
    return problem or (_json_lines_problem(path) if dataset == "json" else None)


def _parquet_problem(path: Path) -> str | None:
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
    except Exception as err:  # pyarrow raises several kinds for a file that is not parquet
        return f"is not a readable parquet file ({type(err).__name__}: {err}); expected a parquet file"
    if meta.num_rows == 0:
        columns = ", ".join(meta.schema.names)
        return f"holds 0 rows (columns: {columns}): expected at least one row; remove it from data_files or fill it"
    return None


def _utf8_problem(path: Path) -> str | None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 1
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_CHUNK)
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:
                at = offset - pending + err.start
                lines += chunk[: max(0, err.start - pending)].count(b"\n")
                bad = err.object[err.start : err.start + 1].hex()
                return (
                    f"is not UTF-8: byte 0x{bad} at offset {at} (line {lines}) cannot be decoded; "
                    f"expected UTF-8 text: re-encode it (e.g. `iconv -f latin1 -t utf-8 {path.name} > "
                    f"{path.stem}.utf8{path.suffix}`)"
                )
            if not chunk:
                return None
            offset += len(chunk)
            lines += chunk.count(b"\n")


def _json_lines_problem(path: Path) -> str | None:
    """The first line of a JSON lines file that is not a JSON value (a whole-file JSON array is left to datasets)."""
    import json

    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.read(1)
        while first and first.isspace():
            first = handle.read(1)
        if first == "[":
            return None
        handle.seek(0)
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as err:
                return (
                    f"is not valid JSON lines: line {number} ({line.strip()[:60]!r}) cannot be parsed ({err.msg} "
                    f"at column {err.colno}); fix or remove that line"
                )
    return None


def _header_only(path: Path) -> str | None:
    with open(path, "rb") as handle:
        header = handle.readline()
        while chunk := handle.read(_CHUNK):
            if chunk.strip():
                return None
    names = header.decode("utf-8", errors="replace").strip()
    return (
        f"has a header ({names}) but no rows: expected at least one data row below the header; "
        "add rows or remove the file from data_files"
    )


class InputFiles:
    """Mixin for a data config with ``dataset``, ``data_files`` and ``input_hash`` fields: what ``load`` reads."""

    dataset: str | None
    data_files: Any
    input_hash: InputHash
    storage_options: Mapping[str, Any] | None

    @cached_property
    def input_files(self) -> Any:
        """``data_files`` with globs and folders expanded: the files ``load`` reads."""
        return expand_data_files(self.data_files, self.dataset, self.storage_options)

    @cached_property
    def identified_files(self) -> Any:
        """The files whose identity enters the cache key: :attr:`input_files`, or with none, a local ``dataset`` path's files.

        ``dataset="path/to/folder"`` (a dataset folder or script, no ``data_files``) is read by
        ``datasets`` from that path: every file under it (hidden ones aside) is identified, so an
        edit there changes the key as an edit of a named file does.
        """
        if self.input_files is not None or self.dataset in (None, *_SUFFIXES) or not _exists(self.dataset):
            return self.input_files
        return _unique(_folder_files(Path(self.dataset).expanduser()))

    @cached_property
    def input_sizes(self) -> dict[str, int]:
        """Each identified file's size in bytes, as identified (no second ``stat`` or request); by name."""
        first = 1 if self._from_folder else 0  # a folder's entries start with the name inside it
        sized = zip(file_names(self.identified_files), flat_entries(self.input_identity))
        return {name: int(e[first]) for name, e in sized if len(e) > first + 1}

    @cached_property
    def input_identity(self) -> Any:
        """The identity of :attr:`identified_files` when the config was built (see :meth:`identify_inputs`)."""
        return self.identify_inputs()

    def identify_inputs(self) -> Any:
        """The identity of :attr:`identified_files` now (content hashes, or metadata: ``input_hash``).

        The files of a ``dataset`` folder are each also named by their path inside it:
        ``datasets`` reads the splits from their names there.
        """
        identity = files_identity(self.identified_files, self.input_hash, self.storage_options)
        if not self._from_folder:
            return identity
        root = Path(self.dataset or "").expanduser().resolve()
        return [
            [_inside(name, root), *entry] for name, entry in zip(file_names(self.identified_files), identity)
        ]

    @property
    def dataset_identity(self) -> str | None:
        """``dataset`` as the cache key holds it: a local dataset folder's path is left out (its files name it)."""
        return LOCAL_DATASET if self._from_folder else self.dataset

    @property
    def _from_folder(self) -> bool:
        """Whether :attr:`identified_files` are a ``dataset`` folder's (no ``data_files``)."""
        return self.identified_files is not self.input_files


def _inside(name: str, root: Path) -> str:
    try:
        return Path(name).relative_to(root).as_posix()
    except ValueError:  # the dataset names one file: its own name
        return Path(name).name


def _folder_files(path: Path) -> Iterable[Path]:
    if not path.is_dir():
        return [path]
    return (
        p
        for p in path.rglob("*")
        if not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(path).parts)
    )

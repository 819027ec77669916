"""What lightning_order writes beside a run: the tokenizer folder beside the checkpoints, the loss curve
beside the logs.

Both go where the run's own files go, through fsspec as Lightning writes its checkpoints and logs
(``lightning_fabric``'s ``get_filesystem`` is fsspec's ``url_to_fs``, called here without importing
torch): a local folder, or ``s3://``, ``gs://``, ``memory://``..., never a local
folder named after the URL. Local files and folders get the process's umask, as any file would.

A folder is written only over a folder we wrote. It carries an ownership record
(:data:`OWNERSHIP_FILE`: the name and content hash of each file we wrote) and is replaced only
while it holds exactly those files, unchanged; it is not rewritten when its content is already
the one asked for. Anything else at the path (a user's folder, the Hugging Face folder passed as
``tokenizer=``, a file, a symlink, a folder of ours edited since) is left as it is and named in
an :class:`~lightning_order.errors.OutputError`. The trade-off: a folder a user touched is no
longer updated, and the message says to remove it or to write elsewhere.

A folder is written beside its path first and moved into place, so a run stopped midway leaves
no half-written folder under the name (a local move is one rename; an object store's is a copy).
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import uuid
from collections.abc import Mapping
from pathlib import Path

import xxhash
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from lightning_order.errors import OutputError

__all__ = [
    "OWNERSHIP_FILE",
    "describe_os_error",
    "exists",
    "get_filesystem",
    "join",
    "write_file",
    "write_owned_folder",
]

#: The record, inside a folder lightning_order wrote, of the files it wrote there and their hashes.
OWNERSHIP_FILE = "lightning_order_files.json"
_WRITER = "lightning_order"


def join(path: str | Path, *names: str) -> str:
    """``path`` and ``names`` joined with ``/``: a URL stays a URL (``Path`` would make ``memory:/x``)."""
    return posixpath.join(str(path), *names) if "://" in str(path) else str(Path(path, *names))


def get_filesystem(path: str | Path) -> AbstractFileSystem:
    """The fsspec filesystem of ``path`` (local for a plain path), as Lightning picks it for its own files."""
    fs, _ = url_to_fs(str(path))
    return fs


def exists(path: str | Path) -> bool:
    """Whether ``path`` (local or an fsspec URL) exists; an unreachable storage counts as no."""
    try:
        return bool(get_filesystem(path).exists(str(path)))
    except (OSError, ValueError, ImportError):
        return False


def _shown(path: str | Path, fs: AbstractFileSystem) -> str | Path:
    """What callers get back: a ``Path`` for a local path (as before), the URL otherwise."""
    return Path(path) if isinstance(fs, LocalFileSystem) else str(path)


def write_file(path: str | Path, data: bytes) -> str | Path:
    """Writes ``data`` at ``path`` through fsspec, making its folder if missing.

    Returns:
        ``path`` (a ``Path`` when local).

    Raises:
        OSError: the storage refused (read-only, a folder in the way, no such bucket...).
    """
    fs = get_filesystem(path)
    parent = posixpath.dirname(str(path).rstrip("/")) if "://" in str(path) else str(Path(path).parent)
    fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(str(path), data)
    return _shown(path, fs)


def describe_os_error(err: OSError) -> str:
    """``IsADirectoryError: Is a directory``: an OS error in a few words, without its traceback."""
    reason = err.strerror or str(err) or "refused"
    return f"{type(err).__name__}: {reason}"


def _digest(data: bytes) -> str:
    return f"xxh3_128:{xxhash.xxh3_128_hexdigest(data)}"


def _refusal(path: str, why: str, fix: str) -> OutputError:
    return OutputError(
        f"{path}: {why}, so it is not replaced (lightning_order replaces only a folder it wrote: "
        f"{OWNERSHIP_FILE} and the files it lists, unchanged); {fix}"
    )


def _owned_files(fs: AbstractFileSystem, path: str, fix: str) -> dict[str, str] | None:
    """The files our record lists at ``path`` (``None``: nothing there); an :class:`OutputError` if not ours."""
    if not fs.lexists(path):
        return None
    try:
        info = fs.info(path)
    except FileNotFoundError:  # a symlink to nothing
        info = {"islink": True, "type": "other"}
    if info.get("islink"):
        raise _refusal(path, "a symlink", fix)
    if info.get("type") != "directory":
        raise _refusal(path, "a file, not a folder", fix)
    try:
        record = json.loads(fs.cat_file(join(path, OWNERSHIP_FILE)))
    except (OSError, ValueError):
        record = None
    files = record.get("files") if isinstance(record, dict) and record.get("writer") == _WRITER else None
    if not isinstance(files, dict):
        raise _refusal(path, f"a folder lightning_order did not write (no {OWNERSHIP_FILE})", fix)
    present = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))
    expected = sorted([*files, OWNERSHIP_FILE])
    if present != expected:
        changed = sorted(set(present) ^ set(expected))
        raise _refusal(
            path, f"changed since lightning_order wrote it ({', '.join(changed)} added or removed)", fix
        )
    for name, digest in files.items():
        if _digest(fs.cat_file(join(path, name))) != digest:
            raise _refusal(path, f"changed since lightning_order wrote it ({name} edited)", fix)
    return {str(k): str(v) for k, v in files.items()}


def write_owned_folder(
    path: str | Path, files: Mapping[str, bytes], *, fix: str = "remove it, or write elsewhere"
) -> str | Path:
    """Writes ``files`` (name -> content) as the folder ``path``, unless something not ours is there.

    Nothing is written when the folder is ours and already holds exactly this content.

    Args:
        path: the folder, local or an fsspec URL.
        files: the content of the folder (flat: names without ``/``).
        fix: what the user can do when the folder is not ours, for the message.

    Returns:
        ``path`` (a ``Path`` when local).

    Raises:
        OutputError: what is at ``path`` is not a folder lightning_order wrote, unchanged.
        OSError: the storage refused the write (read-only...); the folder is then as it was.
    """
    fs = get_filesystem(path)
    target = str(path).rstrip("/")
    wanted = {name: _digest(data) for name, data in files.items()}
    owned = _owned_files(fs, target, fix)
    if owned == wanted:
        return _shown(path, fs)  # the same content: not rewritten at every checkpoint
    if owned is not None and isinstance(fs, LocalFileSystem) and not os.access(target, os.W_OK):
        # Made read-only since we wrote it: a rename in a writable parent would still replace it.
        raise PermissionError(errno.EACCES, "Permission denied (the folder is read-only)", target)
    parent, name = (
        posixpath.split(target) if "://" in target else (str(Path(target).parent), Path(target).name)
    )
    fresh = join(parent, f".{name}-{uuid.uuid4().hex[:12]}")
    aside = join(parent, f".{name}-old-{uuid.uuid4().hex[:12]}")
    record = {"writer": _WRITER, "files": wanted}
    try:
        fs.makedirs(fresh, exist_ok=False)
        for file_name, data in files.items():
            fs.pipe_file(join(fresh, file_name), data)
        fs.pipe_file(join(fresh, OWNERSHIP_FILE), json.dumps(record, indent=2, sort_keys=True).encode())
        if owned is not None:
            _move_folder(fs, target, aside, [*owned, OWNERSHIP_FILE])
        _move_folder(fs, fresh, target, [*files, OWNERSHIP_FILE])
    except OSError:
        _remove_quietly(fs, fresh)
        if owned is not None and fs.lexists(aside) and not fs.lexists(target):
            _move_folder(fs, aside, target, [*owned, OWNERSHIP_FILE])  # ours again, as it was
        raise
    _remove_quietly(fs, aside)
    return _shown(path, fs)


def _move_folder(fs: AbstractFileSystem, source: str, dest: str, names: list[str]) -> None:
    """Moves the flat folder ``source`` (holding ``names``) to ``dest``: one rename locally, a copy per file on a store.

    An object store has no folders: ``mv(recursive=True)`` of a prefix asks s3fs to copy the
    prefix itself as an object (``NoSuchKey``), so each file is copied by name, then the source
    removed.
    """
    if isinstance(fs, LocalFileSystem):
        fs.mv(source, dest, recursive=True)
        return
    for name in names:
        fs.copy(join(source, name), join(dest, name))
    fs.rm([join(source, name) for name in names])
    fs.invalidate_cache(source)
    fs.invalidate_cache(dest)


def _remove_quietly(fs: AbstractFileSystem, path: str) -> None:
    """Removes a folder of ours that is no longer needed; one left behind is only untidy, never read."""
    try:
        if fs.lexists(path):
            fs.rm(path, recursive=True)
    except OSError:
        pass

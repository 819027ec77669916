"""The bytes on disk: content hashes of files, their verification, and storage errors in one line.

The prepared cache and the input files are identified by what they hold, not by their names or
dates: :func:`file_digest` is an xxh3 (128-bit) hash of a file's bytes, read in 4 MiB chunks
(at memory speed; the cost is measured in docs/reliability.md). :func:`file_records` lists every file of a folder
with its size and hash; :func:`verify_files` compares a folder with such a list and names each
file that is missing, empty, truncated or whose bytes changed. :func:`storage_error` turns a
full disk, a read-only file system or a denied write, wherever it surfaces (even wrapped by
``datasets``), into a :class:`~lightning_order.errors.DataError` naming the step, the path and,
for a full disk, the free space left; :func:`read_error` does the same for an input file that
``stat`` accepts and a read refuses (a permission, an ``EIO``), naming the file. :func:`write_new`, :func:`replace_file` and
:func:`save_array` write files without ever following a link planted at their name (exclusive
creation with ``O_NOFOLLOW``; a replacement is a rename over the name, which replaces a link, never
its target), with the mode the process umask gives (like every other file of the cache), and
through ``write(2)``, so a full disk is an ``ENOSPC`` naming the file, never a short write
without an errno.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import xxhash

from lightning_order.errors import DataError

__all__ = [
    "CACHE_HINT",
    "file_digest",
    "file_records",
    "concatenate_arrays",
    "free_space",
    "read_error",
    "read_errors",
    "replace_file",
    "save_array",
    "storage_error",
    "storage_errors",
    "verify_files",
    "write_new",
]

#: What to do when the cache location cannot take the data.
CACHE_HINT = "free space there, or point cache_dir (or $LIGHTNING_ORDER_CACHE) to a writable disk with room"
_CHUNK = 1 << 22
_WHAT = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


#: Exclusive creation that never follows a link at the name; the mode is 0o666 less the umask.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _write_all(fd: int, data: Any, path: str | os.PathLike[str]) -> None:
    """Writes every byte of ``data`` to ``fd`` (an ``OSError`` names ``path``, with its errno)."""
    view = memoryview(data).cast("B")
    try:
        while len(view):
            view = view[os.write(fd, view[:_CHUNK]) :]
    except OSError as err:
        raise OSError(err.errno, err.strerror, os.fspath(path)) from err


def write_new(path: str | os.PathLike[str], data: bytes) -> None:
    """Creates ``path`` (it must not exist, not even as a link) and writes ``data`` into it.

    Raises:
        FileExistsError: something (a file, a symbolic link) already has that name: nothing
            is written, and no link is followed.
        OSError: the write failed (a full disk: ``ENOSPC``, naming ``path``).
    """
    fd = os.open(path, _NEW_FILE, 0o666)
    try:
        _write_all(fd, data, path)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def replace_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Writes ``data`` to a fresh file beside ``path`` and renames it over ``path``.

    A symbolic link planted at ``path`` is replaced by the new file, never written through (a
    rename replaces the name itself), and a reader sees the old content or the new, never half.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write_new(tmp, data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save_array(path: str | os.PathLike[str], array: Any) -> None:
    """``numpy.save(path, array)``, the same bytes, in a new file (what was at ``path`` is replaced).

    numpy's own writer reports a full disk as "N requested and M written", with no errno and
    no file name; this one raises ``OSError(ENOSPC, ..., path)``. A file or link already at
    ``path`` is unlinked first (a link is removed, never followed).
    """
    import io

    import numpy as np

    data = np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(data))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, _NEW_FILE, 0o666)
    try:
        _write_all(fd, header.getvalue(), path)
        if data.size:
            _write_all(fd, data.reshape(-1).view(np.uint8), path)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def concatenate_arrays(path: str | os.PathLike[str], parts: list[str | os.PathLike[str]], dtype: Any) -> int:
    """One ``.npy`` at ``path`` holding the 1-D arrays saved at ``parts``, in order; its length.

    The parts are read one at a time (memory-mapped) and written through ``write(2)`` after the
    header, so the memory used is one part's pages, never the whole result (a list of every
    document's hash would grow with the corpus). Written like :func:`save_array`: a new file,
    never through a link, a full disk an ``ENOSPC`` naming the file.
    """
    import io

    import numpy as np

    arrays = [np.load(part, mmap_mode="r") for part in parts]
    total = sum(int(a.shape[0]) for a in arrays)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header,
        {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (total,)},
    )
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, _NEW_FILE, 0o666)
    try:
        _write_all(fd, header.getvalue(), path)
        for array in arrays:
            if array.size:
                _write_all(fd, np.ascontiguousarray(array, dtype=dtype).view(np.uint8), path)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    return total


def free_space(path: str | os.PathLike[str] | None) -> str:
    """The free space of the file system holding ``path`` (or its nearest existing folder), in words."""
    if path is None:
        return "unknown free space"
    folder = Path(os.path.abspath(os.fspath(path)))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return "unknown free space"
    return f"{_size(usage.free)} free of {_size(usage.total)} on that file system"


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} bytes"  # pragma: no cover - the loop returns


def file_digest(path: str | os.PathLike[str]) -> str:
    """The xxh3 (128-bit, hex) hash of the file's bytes."""
    digest = xxhash.xxh3_128()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def file_records(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size", "xxh3"}}`` of every file under ``folder`` (names in ``skip`` left out).

    Args:
        folder: the folder to list (recursively).
        skip: top-level names not to list (e.g. the manifest that will hold the list).
    """
    out = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and name.split("/")[0] not in skip:
            out[name] = {"size": path.stat().st_size, "xxh3": file_digest(path)}
    return out


def verify_files(folder: Path, records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What differs between ``folder`` and ``records`` (from :func:`file_records`): one line per file.

    Returns:
        ``"<file>: missing"``, ``"<file>: empty (0 bytes, expected N)"``, ``"<file>: truncated
        (...)"``, ``"<file>: content changed (...)"``...; empty when every listed file is intact.
        Files not listed (e.g. caches ``datasets`` adds later) are not judged.
    """
    if not records:
        return [
            "the manifest lists no file hashes (an older lightning_order wrote it): it cannot be verified"
        ]
    problems = []
    for name, record in sorted(records.items()):
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts:
            problems.append(f"{name}: not a path inside the cache folder")
            continue
        path = folder / pure
        try:
            info = path.stat()
        except FileNotFoundError:
            problems.append(f"{name}: missing")
            continue
        except OSError as err:
            problems.append(f"{name}: unreadable ({err.strerror})")
            continue
        size = int(record.get("size", -1))
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"{name}: not a regular file")
        elif info.st_size != size:
            kind = "empty" if info.st_size == 0 else "truncated" if info.st_size < size else "grown"
            problems.append(f"{name}: {kind} ({info.st_size} bytes, expected {size})")
        elif file_digest(path) != record.get("xxh3"):
            problems.append(f"{name}: content changed (its xxh3 hash differs from the manifest's)")
    return problems


def _denied_elsewhere(error: OSError, folder: str | os.PathLike[str] | None) -> bool:
    """A permission error on a file outside ``folder`` (e.g. an unreadable input), not a cache write."""
    if error.errno not in (errno.EACCES, errno.EPERM) or folder is None or error.filename is None:
        return False
    name = os.path.abspath(os.fsdecode(error.filename))
    return not name.startswith(os.path.abspath(os.fspath(folder)))


def storage_error(error: BaseException, step: str, path: str | os.PathLike[str] | None) -> DataError | None:
    """A full disk, a read-only file system or a denied write in ``error``'s chain, as one DataError.

    Args:
        error: the error raised (``datasets`` often wraps the ``OSError``: the whole chain of
            causes is searched).
        step: the step that was writing.
        path: where it was writing, when the ``OSError`` does not say.

    Returns:
        The :class:`DataError` (naming the step, the path, the errno and the fix), or ``None``
        when the error is not about storage (a permission denied on a file outside ``path``,
        e.g. an input file that cannot be read, is left as it is).
    """
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _WHAT and not _denied_elsewhere(cause, path):
            where = cause.filename or path
            full = cause.errno in (errno.ENOSPC, errno.EDQUOT)
            space = f", {free_space(where)}" if full else ""
            return DataError(
                f"{_WHAT[cause.errno]} while writing {where} ([Errno {cause.errno}] {cause.strerror}{space}); "
                + CACHE_HINT,
                step=step,
            )
        cause = cause.__cause__ or cause.__context__
    return None


@contextlib.contextmanager
def storage_errors(step: str, path: str | os.PathLike[str] | None) -> Iterator[None]:
    """A block whose full disk, read-only file system or denied write becomes one :class:`DataError`.

    Other errors (and a :class:`DataError` already raised inside) pass through unchanged.

    Args:
        step: the step that writes (named in the error).
        path: where it writes, when the ``OSError`` does not say.
    """
    try:
        yield
    except DataError:
        raise
    except Exception as err:
        converted = storage_error(err, step, path)
        if converted is None:
            raise
        raise converted from err


def read_error(error: OSError, path: str | os.PathLike[str], step: str) -> DataError:
    """An input file that could not be read (``PermissionError``, ``EIO``, gone), as one :class:`DataError`.

    The ``OSError`` of a read often names no file (``EIO`` from ``read(2)``); the caller knows it.

    Args:
        error: what the open or the read raised.
        path: the file being read.
        step: the step that was reading.
    """
    code = f"[Errno {error.errno}] " if error.errno is not None else ""
    what = error.strerror or str(error) or type(error).__name__
    fix = (
        "give this process read access to it"
        if error.errno in (errno.EACCES, errno.EPERM)
        else "check the disk or copy the file elsewhere"
        if error.errno == errno.EIO
        else "check the file"
    )
    return DataError(
        f"data file {os.fspath(path)} could not be read ({type(error).__name__}: {code}{what}); "
        f"{fix}, or remove it from data_files",
        step=step,
    )


@contextlib.contextmanager
def read_errors(step: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """A block that reads input file ``path``: any ``OSError`` becomes one :class:`DataError` naming the file.

    Args:
        step: the step that reads (named in the error).
        path: the file read in the block.
    """
    try:
        yield
    except OSError as err:
        raise read_error(err, path, step) from err

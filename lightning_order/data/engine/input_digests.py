"""Input files hashed once per machine, not once per process: a digest reused while the file's status holds.

The cache key names the input by content (xxh3 of every byte): every process that built a
DataModule hashed every input file, so each rank of a training run read the whole corpus at
``setup``, and a preparation read it twice (the key, then the check after its read). After one
process of a machine has hashed a file, it writes a *digest record* (in the user's own cache
folder, ``~/.cache/lightning_order/identified/`` or ``$LIGHTNING_ORDER_CACHE/identified/``, named
by the file's path and the host): the file's device, inode, size, modification time and change
time (ns), and its xxh3. A later process whose ``stat`` of the file gives the same five numbers
takes the recorded digest and reads nothing.

Why a status proves the content: the kernel sets a file's change time on every write, and no
call sets it back (``os.utime`` restores the modification time, never the change time); a file
replaced by another has another inode. So equal statuses mean no write since the hash, except
within one tick of a coarse file-system clock: a file changed less than :data:`RACY_WINDOW_NS`
before it was hashed gets no record and is hashed every time, as ``git`` re-hashes its "racily
clean" files. The ranks of a machine hash one at a time (a lock beside the record): the first
hashes, the others find its record. A record folder that cannot be written keeps no record:
the file is hashed, as before.

Where the status does not prove the content: on ``tmpfs`` and ``ramfs`` (``/dev/shm``, a RAM
disk) a write through a shared memory map (``mmap.mmap`` of a file opened for writing) leaves
every status field unchanged on Linux, so a record would serve the old digest and the cache of
the old data. Files on those file systems (:func:`file_system`, from ``/proc/self/mountinfo``
by the file's device) get no record and are hashed by every process: what that gives up is the
one-read-per-machine saving for them, at memory speed since their bytes are in RAM. Where the
file system cannot be told (no ``/proc``: not Linux; a device ``mountinfo`` does not list, as a
``btrfs`` subvolume's) the status is trusted, as before.

An object in a store (``s3://``...) has no status, but every version of it has metadata that
names it: its URL, size, ETag (or the store's other digest) and VersionId. Its digest, the same
xxh3 of its bytes a local copy gives, is computed by reading it once per version and kept in an
*object digest record* beside the file records (``identified-objects/``, named by the URL and
the host) under those four values, and in this process's memory; a later identification asks the
store for the metadata only (one ``HEAD``) and reads no byte while they are the recorded ones. An
object overwritten gets a new ETag, so it is read and hashed again. What this trusts: that a
store gives another ETag (or size, or version) to other bytes under one URL, as S3, GCS, Azure,
MinIO and R2 do on every write.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import xxhash
from filelock import FileLock

from lightning_order.data.engine.cache import default_cache_dir
from lightning_order.data.engine.object_store import hash_object
from lightning_order.data.engine.storage import file_digest, read_errors, replace_file
from lightning_order.data.engine.verification import host_name, machine_record

__all__ = [
    "RACY_WINDOW_NS",
    "UNRECORDED_FILE_SYSTEMS",
    "file_system",
    "input_digest",
    "object_digest",
    "object_record_path",
    "record_path",
]

#: A file changed this close to its hash (ns) is never recorded: a coarse clock could hide a later write.
RACY_WINDOW_NS = 2_000_000_000
_FORMAT = "lightning_order.input-digest"
#: File systems where a write can leave a file's status unchanged (through a shared mmap): never recorded.
UNRECORDED_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
_MOUNTINFO = Path("/proc/self/mountinfo")
_OBJECT_FORMAT = "lightning_order.object-digest"
#: This process's object digests by ``(url, size, content, version)``: a check after a read asks no record.
_OBJECT_DIGESTS: dict[tuple[Any, ...], str] = {}
_OBJECT_DIGESTS_LOCK = threading.Lock()


def file_system(path: Path) -> str | None:
    """The type of the file system holding ``path`` (``"ext4"``, ``"tmpfs"``, ...), or ``None`` when it cannot be told.

    Read from ``/proc/self/mountinfo`` by the file's device number (``major:minor``, its third
    field; the type follows the `` - `` separator), so bind mounts and links need no path matching.
    """
    try:
        device = os.stat(path).st_dev
    except OSError:
        return None
    return _device_file_system(os.major(device), os.minor(device))


@functools.cache
def _device_file_system(major: int, minor: int) -> str | None:
    """The file system type of device ``major:minor`` in the mount table, read once per device and process.

    Every input file of a preparation asks (thousands, on each rank): a device keeps its file
    system while it is mounted, so the table is not read again for each of them.
    """
    try:
        table = _MOUNTINFO.read_text()
    except OSError:
        return None
    found = re.search(rf"^\d+ \d+ {major}:{minor} .*? - (\S+) ", table, flags=re.MULTILINE)
    return None if found is None else found.group(1)


def record_path(path: Path, records: Path) -> Path:
    """This machine's digest record of the input file ``path``, in ``records/identified/``."""
    return machine_record(path, records, "identified")


def _status(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _recorded(path: Path, record: Path) -> str | None:
    """The recorded digest of ``path`` when its status is the recorded one, else ``None``."""
    try:
        data = json.loads(record.read_text())
        status = _status(path)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("path") != str(path.resolve()):
        return None
    return str(data["xxh3"]) if data.get("status") == status and isinstance(data.get("xxh3"), str) else None


def _hashed(path: Path) -> str:
    """``path``'s digest; a read that stat let through and the file refuses (a permission, an EIO) names the file."""
    with read_errors("load", path):
        return file_digest(path)


def _hash_and_record(path: Path, record: Path) -> str:
    before = _status(path)
    digest = _hashed(path)
    after = _status(path)
    # Recorded only when nothing wrote during the hash and the last write is older than a clock tick.
    if before == after and time.time_ns() - max(after[3], after[4]) >= RACY_WINDOW_NS:
        data = {
            "format": _FORMAT,
            "path": str(path.resolve()),
            "host": host_name(),
            "status": after,
            "xxh3": digest,
        }
        with contextlib.suppress(OSError):
            replace_file(record, json.dumps(data).encode())
    return digest


def input_digest(path: Path, records: Path | None = None) -> str:
    """The xxh3 of input file ``path``: this machine's record when the file's status still matches, else hashed.

    Args:
        path: a local input file.
        records: the user's own cache folder (``None``: :func:`~.cache.default_cache_dir`).

    Returns:
        the same digest :func:`~.storage.file_digest` gives (always hashed on :data:`UNRECORDED_FILE_SYSTEMS`).

    Raises:
        DataError: the file cannot be read (a permission, an ``EIO``), naming it.
    """
    if file_system(path) in UNRECORDED_FILE_SYSTEMS:
        return _hashed(path)  # a write through a shared mmap keeps the status there: always hashed
    if records is None:
        records = default_cache_dir()
    record = record_path(path, records)
    found = _recorded(path, record)
    if found is not None:
        return found
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(record.with_suffix(".lock")))
        lock.acquire()
    except OSError:  # no writable record folder: hash without a record
        return _hashed(path)
    try:
        found = _recorded(path, record)  # another process of this machine hashed it meanwhile
        return found if found is not None else _hash_and_record(path, record)
    finally:
        lock.release()


def object_record_path(url: str, records: Path) -> Path:
    """This machine's digest record of the object ``url``, in ``records/identified-objects/``."""
    return records / "identified-objects" / f"{xxhash.xxh3_64_hexdigest(url.encode())}-{host_name()}.json"


def _recorded_object(record: Path, version: list[Any]) -> str | None:
    """The recorded digest when ``record`` names this ``[url, size, content, version]``, else ``None``."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _OBJECT_FORMAT or data.get("object") != version:
        return None
    return str(data["xxh3"]) if isinstance(data.get("xxh3"), str) else None


def _remember(version: list[Any], digest: str) -> str:
    with _OBJECT_DIGESTS_LOCK:
        _OBJECT_DIGESTS[tuple(version)] = digest
    return digest


def object_digest(
    identity: Sequence[Any], storage_options: Mapping[str, Any] | None = None, records: Path | None = None
) -> str:
    """The xxh3 of an object's bytes (what :func:`input_digest` gives a local copy), read once per version.

    Args:
        identity: the object's :func:`~.object_store.object_identity`, ``[url, size, content, version]``.
        storage_options: the filesystem's keyword arguments, for the read.
        records: the user's own cache folder (``None``: :func:`~.cache.default_cache_dir`).

    Returns:
        the digest recorded for this version on this machine (or in this process), else the one
        :func:`~.object_store.hash_object` reads and records.

    Raises:
        DataError: the object cannot be read, or it changed while it was read (naming it).
    """
    version = [str(identity[0]), int(identity[1]), identity[2], identity[3]]
    with _OBJECT_DIGESTS_LOCK:
        known = _OBJECT_DIGESTS.get(tuple(version))
    if known is not None:
        return known
    if records is None:
        records = default_cache_dir()
    record = object_record_path(version[0], records)
    found = _recorded_object(record, version)
    if found is not None:
        return _remember(version, found)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(record.with_suffix(".lock")))
        lock.acquire()
    except OSError:  # no writable record folder: read without a record
        return _remember(version, hash_object(version[0], list(identity), storage_options))
    try:  # the ranks of a machine read one at a time: the others find the first one's record
        found = _recorded_object(record, version)
        if found is None:
            found = hash_object(version[0], list(identity), storage_options)
            data = {"format": _OBJECT_FORMAT, "object": version, "host": host_name(), "xxh3": found}
            with contextlib.suppress(OSError):
                replace_file(record, json.dumps(data).encode())
        return _remember(version, found)
    finally:
        lock.release()

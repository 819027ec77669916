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
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
from pathlib import Path

from filelock import FileLock

from lightning_order.data.engine.storage import file_digest, read_errors, replace_file
from lightning_order.data.engine.verification import host_name, machine_record

__all__ = ["RACY_WINDOW_NS", "UNRECORDED_FILE_SYSTEMS", "file_system", "input_digest", "record_path"]

#: A file changed this close to its hash (ns) is never recorded: a coarse clock could hide a later write.
RACY_WINDOW_NS = 2_000_000_000
_FORMAT = "lightning_order.input-digest"
#: File systems where a write can leave a file's status unchanged (through a shared mmap): never recorded.
UNRECORDED_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
_MOUNTINFO = Path("/proc/self/mountinfo")


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
        from lightning_order.data.engine.cache import default_cache_dir

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

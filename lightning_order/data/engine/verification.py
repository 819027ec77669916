"""A prepared cache verified once per machine, not once per rank per ``setup``.

Verifying a cache hashes every file it holds (:func:`~.cache.cache_problems`): on a large corpus
that is minutes of reading, and every rank of every run did it. After one process of a machine has
verified a published build, it writes a *verification record* (in the user's own cache folder,
``~/.cache/lightning_order/verified/`` or ``$LIGHTNING_ORDER_CACHE/verified/``, never in
``cache_dir``; named by the cache folder's path and the host, so another machine verifies for
itself, also on a shared file system): the build's identity (:func:`~.cache.published_identity`: its marker nonce and
the manifest's inode and time) and each file's size, modification time, inode and xxh3. Later
checks on that machine compare the files' ``stat`` with the record, O(files), and hash nothing;
a file written since (a changed size, time or inode) sends the check back to a full verification,
so a damaged, truncated, replaced or missing file is still caught. The ranks of a machine verify
one at a time (a lock beside the record): the first hashes, the others find its record.

The trade-off, as ``git``'s index makes it: a change that keeps a file's size, modification time
and inode is not seen without hashing. A file modified within :data:`RACY_WINDOW_S` of the record
(where a coarse file-system clock could hide a later write) is hashed again every time, as git
re-hashes "racily clean" files.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash
from filelock import FileLock

from lightning_order.data.engine.storage import file_digest, replace_file
from lightning_order.ledger import MANIFEST_NAME, StepLedger

__all__ = ["RACY_WINDOW_S", "host_name", "machine_record", "record_path", "verified_problems"]

#: Files modified this close to the record (seconds) are hashed again on every check.
RACY_WINDOW_S = 2.0
_FORMAT = "lightning_order.verified"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname() or "host")[:64]


def host_name() -> str:
    """This machine's name as the records spell it (letters, digits, ``_.-``; 64 at most)."""
    return _host()


def machine_record(path: Path, user_cache: Path, kind: str) -> Path:
    """This machine's record about ``path`` in ``user_cache/<kind>/``: named by the path and the host."""
    name = xxhash.xxh3_64_hexdigest(str(path.resolve()).encode())
    return user_cache / kind / f"{name}-{_host()}.json"


def record_path(path: Path, user_cache: Path) -> Path:
    """This machine's verification record of the cache folder ``path``, in ``user_cache/verified/``."""
    return machine_record(path, user_cache, "verified")


def _stat(path: Path) -> list[int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def _still_verified(path: Path, identity: str | None, records: Path) -> bool:
    """Whether this machine's record names the build at ``path`` and no file changed since."""
    try:
        record = json.loads(record_path(path, records).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("format") != _FORMAT or record.get("identity") != identity:
        return False
    files = record.get("files")
    if not isinstance(files, dict) or MANIFEST_NAME not in files:
        return False
    for name, entry in files.items():
        target = path / name
        if _stat(target) != entry.get("stat"):
            return False
        if entry.get("racy") and file_digest(target) != entry.get("xxh3"):
            return False
    return True


def _write_record(path: Path, identity: str, records: Path) -> None:
    """Records the build at ``path`` as verified on this machine (best effort: a read-only root keeps no record)."""
    ledger = StepLedger.load(path)
    listed = {name: str(entry.get("xxh3", "")) for name, entry in (ledger.info.get("files") or {}).items()}
    listed[MANIFEST_NAME] = file_digest(path / MANIFEST_NAME)
    now = time.time_ns()
    files: dict[str, Any] = {}
    for name, digest in listed.items():
        found = _stat(path / name)
        if found is None:
            return
        racy = now - found[1] < RACY_WINDOW_S * 1e9
        files[name] = {"stat": found, "xxh3": digest, "racy": racy}
    data = {"format": _FORMAT, "path": str(path), "identity": identity, "host": _host(), "files": files}
    with contextlib.suppress(OSError):
        replace_file(record_path(path, records), json.dumps(data).encode())


def verified_problems(
    path: Path, identity: str | None, check: Callable[[], list[str]], records: Path
) -> list[str]:
    """``check()``'s problems with the cache at ``path``, or none at once when this machine verified the build.

    Args:
        path: the cache folder.
        identity: its published identity now (``None``: nothing published; ``check`` decides).
        check: the full verification (every file hashed against the manifest).
        records: this user's own cache folder (``default_cache_dir()``): the records are in its ``verified/``.

    Returns:
        ``[]`` when this machine's record still holds (nothing hashed but racy files), else what
        ``check()`` found; a clean ``check()`` leaves a record for the next process.
    """
    if identity is None or not (path / MANIFEST_NAME).is_file():
        return check()
    if _still_verified(path, identity, records):
        return []
    record = record_path(path, records)
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(record.with_suffix(".lock")))
        lock.acquire()
    except OSError:  # no writable record folder: verify without a record
        return check()
    try:
        if _still_verified(path, identity, records):  # another rank of this machine verified it meanwhile
            return []
        problems = check()
        if not problems:
            with contextlib.suppress(OSError, ValueError):
                _write_record(path, identity, records)
        return problems
    finally:
        lock.release()

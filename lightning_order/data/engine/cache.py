"""The prepared-data cache: one folder per pipeline fingerprint, published atomically.

Preparation writes into a temporary folder beside the final one (same file system), writes the
manifest last, and renames the folder into place: a reader finds a complete cache or none, and a
process killed mid-way leaves only a temporary folder that the next preparation deletes. A file
lock beside the folder (``<key>.lock``, :mod:`filelock`) makes one process prepare while the
others (DDP ranks, other nodes on a shared file system) wait and then reuse its result.

Only what this library wrote is ever deleted: ``cache_dir`` may be any folder a user points it
at (a home or project folder), so a leftover is removed only when its name matches the exact
pattern :func:`new_temp_dir` writes (``.tmp-<32 hex>-<pid>-<8 hex>``) *and* it holds the marker
file written when it was created (:data:`TEMP_MARKER`). A final folder that is not an intact
cache is removed only when it holds our manifest or marker; anything else in the way is refused
with a :class:`~lightning_order.errors.DataError`, never deleted.

The manifest records the size and xxh3 content hash of every file of the prepared data (the Arrow
files and their ``state.json``/``dataset_info.json``, ``tokenizer.json``, ``statistics.json``),
and the manifest's own checksum covers that list. :func:`is_complete` verifies every file against
it (:func:`verify_files`), so a flipped bit, a truncated, emptied or missing file is never
trusted: :func:`build_once` warns (:class:`~lightning_order.errors.CacheWarning`, naming the
file) and prepares the folder anew. Hashing runs at memory speed (xxh3); see docs/reliability.md
for the measured cost.

``datasets`` and ``pyarrow`` are imported by the functions that read or write data, so checking a
cache (``audit``, a cache hit) does not import them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from lightning_order.data.engine.storage import (
    CACHE_HINT,
    replace_file,
    storage_error,
    storage_errors,
    verify_files,
    write_new,
)
from lightning_order.data.engine.verification import verified_problems
from lightning_order.errors import CacheWarning, DataError, ManifestError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

log = logging.getLogger(__name__)

__all__ = [
    "CACHE_ENV",
    "LOCK_NOTICE_S",
    "STALE_AFTER_S",
    "TEMP_MARKER",
    "acquire_lock",
    "cache_lock",
    "cache_problems",
    "check_cache_path",
    "default_cache_dir",
    "is_complete",
    "is_own_temp_dir",
    "new_temp_dir",
    "build_once",
    "publish",
    "published_identity",
    "remove_stale",
    "remove_stale_others",
]

#: The environment variable that overrides the default cache folder.
CACHE_ENV = "LIGHTNING_ORDER_CACHE"
#: Temporary folders of *other* configurations older than this (seconds) and not locked are deleted.
STALE_AFTER_S = 6 * 3600
#: How often a process waiting for a cache lock says who holds it (seconds).
LOCK_NOTICE_S = 10.0
#: The file :func:`new_temp_dir` writes first into every folder it makes (it stays when the folder is
#: published): the proof that the library wrote it.
TEMP_MARKER = ".lightning_order"
#: The exact name of a temporary folder: ``.tmp-<cache key>-<pid>-<8 hex>``.
_TEMP_NAME = re.compile(r"\.tmp-(?P<key>[0-9a-f]{32})-(?P<pid>[0-9]+)-[0-9a-f]{8}")


def default_cache_dir() -> Path:
    """``$LIGHTNING_ORDER_CACHE`` if set, else ``~/.cache/lightning_order``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lightning_order"


def cache_lock(root: Path, key: str, timeout: float = -1) -> FileLock:
    """The lock that serialises preparation of ``key`` (a file beside the cache folder).

    Raises:
        DataError: a symbolic link or another non-file stands at the lock's name (the cache root
            may be a user's folder: what is planted there is never opened, written or removed).
    """
    root.mkdir(parents=True, exist_ok=True)
    for path in (root / f"{key}.lock", _holder_path(root, key)):
        _refuse_link(path)
    return FileLock(str(root / f"{key}.lock"), timeout=timeout)


def _refuse_link(path: Path) -> None:
    """Raises when ``path`` is a symbolic link or not a regular file (absent is fine)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise DataError(
            f"the cache lock file {path} is {kind}: lightning_order never writes through it; "
            "remove it (it is recreated), or choose another cache_dir",
            step="prepare_data",
        )


def published_identity(path: Path) -> str | None:
    """What tells one published build of a cache folder from another (``None``: nothing published).

    The marker file written when the folder was made (its pid and creation time) and the
    manifest's inode, time and size: a folder prepared anew under the same key has another
    identity, so a DataModule knows to read it again.
    """
    try:
        info = (path / MANIFEST_NAME).stat()
    except OSError:
        return None
    try:
        marker = (path / TEMP_MARKER).read_text()
    except (OSError, ValueError):
        marker = ""
    return f"{marker}|{info.st_ino}|{info.st_mtime_ns}|{info.st_size}"


def cache_problems(path: Path, key: str | None = None, required: Sequence[str] = ()) -> list[str]:
    """Why ``path`` is not a finished, intact cache of ``key``: one line per problem (empty: it is).

    The manifest must load (its checksum holds), be of ``key``, every file of ``required`` must be
    there (what the pipeline's spec says each prepared folder of it holds, listed or not:
    :attr:`~lightning_order.spec.PipelineSpec.files`, passed by whoever knows the pipeline), and
    every file it lists must have the recorded size and xxh3 hash (:func:`~.storage.verify_files`).
    """
    if not (path / MANIFEST_NAME).is_file():
        return [f"{MANIFEST_NAME}: missing"]
    try:
        ledger = StepLedger.load(path)
    except ManifestError as err:
        return [f"{MANIFEST_NAME}: {err}"]
    if key is not None and ledger.info.get("cache_key") != key:
        return [f"{MANIFEST_NAME}: of cache key {ledger.info.get('cache_key')!r}, not {key!r}"]
    missing = [f"{name}: missing" for name in required if not (path / name).exists()]
    return missing or verify_files(path, ledger.info.get("files") or {})


def is_complete(path: Path, key: str | None = None, required: Sequence[str] = ()) -> bool:
    """Whether ``path`` holds a finished, intact cache of ``key`` (:func:`cache_problems`; hashed once a machine: :mod:`.verification`)."""
    identity = f"{key}|{published_identity(path)}"  # the record names the key and the published build
    return not verified_problems(
        path, identity, lambda: cache_problems(path, key, required), default_cache_dir()
    )


def check_cache_path(final: Path) -> None:
    """Refuses, before any work, a cache path taken by a file or a symbolic link (not a prepared folder).

    Raises:
        DataError: ``final`` is a file, a symbolic link (that is not an intact cache) or another
            non-folder; the message names it and the fix.
    """
    kind = "symbolic link" if final.is_symlink() else None
    if kind is None and final.exists() and not final.is_dir():
        kind = "file"
    if kind:
        raise DataError(
            f"the cache path {final} is a {kind}, not a prepared folder: nothing would be written there; "
            "remove it, or choose another cache_dir",
            step="prepare_data",
        )


def is_own_temp_dir(path: Path, key: str | None = None) -> bool:
    """Whether ``path`` is a temporary folder this library wrote (of ``key``, when given).

    Its name must match ``.tmp-<32 hex>-<pid>-<8 hex>`` exactly and it must hold the marker file
    :func:`new_temp_dir` writes: a user's ``.tmp-notes`` (or any folder we did not create) is
    never taken for ours.
    """
    match = _TEMP_NAME.fullmatch(path.name)
    if match is None or (key is not None and match["key"] != key):
        return False
    try:
        return path.is_dir() and not path.is_symlink() and (path / TEMP_MARKER).is_file()
    except OSError:
        return False


def _refuse_foreign(final: Path) -> None:
    """Raises unless the folder at a cache path was written by this library (manifest or marker)."""
    if final.is_dir() and not ((final / MANIFEST_NAME).is_file() or (final / TEMP_MARKER).is_file()):
        raise DataError(
            f"the cache path {final} is a folder that lightning_order did not write (no manifest): "
            "it is left untouched; move it away, or choose another cache_dir",
            step="prepare_data",
        )


def remove_stale(root: Path, key: str, required: Sequence[str] = ()) -> list[Path]:
    """Deletes leftovers of interrupted preparations of ``key`` (call it holding the lock).

    Only folders this library wrote are touched (:func:`is_own_temp_dir`, and a final folder
    holding our manifest or marker).
    ``required`` names the files a complete folder holds (as for :func:`build_once`).

    Returns:
        The folders removed: temporary folders, and a final folder that is not complete.

    Raises:
        DataError: the final folder exists, is not an intact cache and holds nothing of ours
            (someone else's folder under our cache name: refused, never deleted).
    """
    removed = []
    for tmp in sorted(root.glob(f".tmp-{key}-*")):
        if is_own_temp_dir(tmp, key):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    final = root / key
    if final.is_dir() and not final.is_symlink() and not is_complete(final, key, required):
        _refuse_foreign(final)
        shutil.rmtree(final, ignore_errors=True)
        removed.append(final)
    return removed


def remove_stale_others(root: Path, key: str, older_than: float = STALE_AFTER_S) -> list[Path]:
    """Deletes temporary folders of *other* configurations, when they are ours and it is safe.

    A folder is considered only when :func:`is_own_temp_dir` says this library wrote it. It is
    deleted only when its configuration's lock can be taken at once (no process is preparing it:
    a preparer holds the lock while it writes, and a killed one no longer does) and it was last
    modified more than ``older_than`` seconds ago. Its lock file goes with it when no finished
    cache of that configuration needs it (:mod:`filelock` re-creates a lock file that was removed
    while a waiter held it open, so this cannot let two processes in).

    Returns:
        The folders removed.
    """
    removed = []
    now = time.time()
    for tmp in sorted(root.glob(".tmp-*")):
        if not is_own_temp_dir(tmp):
            continue  # not ours: never touched, whatever its name or age
        other = _TEMP_NAME.fullmatch(tmp.name)["key"]  # type: ignore[index]
        if other == key:
            continue
        lock_path = root / f"{other}.lock"
        try:
            if now - tmp.stat().st_mtime < older_than:
                continue
            with FileLock(str(lock_path), timeout=0):
                shutil.rmtree(tmp, ignore_errors=True)
                if not (root / other).exists() and not any(
                    is_own_temp_dir(p, other) for p in root.glob(f".tmp-{other}-*")
                ):
                    lock_path.unlink(missing_ok=True)
                    _holder_path(root, other).unlink(missing_ok=True)
        except (Timeout, OSError):
            continue  # someone prepares it, or it vanished: leave it
        removed.append(tmp)
    return removed


def new_temp_dir(root: Path, key: str) -> Path:
    """A fresh temporary folder for preparing ``key``, beside the final folder."""
    path = root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if _TEMP_NAME.fullmatch(path.name) is None:
        raise ValueError(f"a cache key is 32 lowercase hex characters (a fingerprint), got {key!r}")
    path.mkdir(parents=True)
    # The marker first: only a folder holding it is ever deleted by a later cleanup. Its nonce
    # makes each build's published identity its own.
    marker = {"key": key, "pid": os.getpid(), "created": time.time(), "nonce": path.name[-8:]}
    write_new(path / TEMP_MARKER, json.dumps(marker).encode())
    return path


def publish(tmp: Path, final: Path) -> Path:
    """Renames the finished temporary folder to its final name (atomic on one file system)."""
    with storage_errors("publish", final):
        os.rename(tmp, final)
    return final


def _holder_path(root: Path, key: str) -> Path:
    return root / f"{key}.lock.json"


def _describe_holder(root: Path, key: str) -> str:
    """Who holds the lock of ``key``, from what the holder wrote when it took it."""
    try:  # never through a link planted at its name
        fd = os.open(_holder_path(root, key), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            holder = json.loads(handle.read(1 << 16))
        if not isinstance(holder, dict):
            raise ValueError("not an object")
    except (OSError, ValueError):
        return "another process (it wrote no details)"
    since = time.time() - float(holder.get("since", time.time()))
    pid, host = holder.get("pid"), holder.get("host")
    alive = ""
    if host == socket.gethostname() and isinstance(pid, int):
        alive = ", alive" if _pid_alive(pid) else ", which no longer exists"
    return f"process {pid} on {host}{alive} ({holder.get('command', '?')}), for {since:.0f} s"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but not ours to signal
        return True
    return True


def acquire_lock(root: Path, key: str, timeout: float | None, step: str) -> FileLock:
    """Takes the lock of ``key``, saying every :data:`LOCK_NOTICE_S` seconds who holds it and for how long.

    The lock is the operating system's (``flock``): a holder that dies releases it at once, and
    the next waiter takes it over. What the holder writes beside it (pid, host, command, since
    when) is what the notices and the timeout name.

    Raises:
        DataError: ``timeout`` seconds passed (``lock_timeout``); the message names the holder and
            what to do.
    """
    lock = cache_lock(root, key)
    start = time.monotonic()
    while True:
        waited = time.monotonic() - start
        wait = LOCK_NOTICE_S if timeout is None else max(0.0, min(LOCK_NOTICE_S, timeout - waited))
        try:
            lock.acquire(timeout=wait)
            break
        except Timeout:
            waited = time.monotonic() - start
            holder = _describe_holder(root, key)
            if timeout is not None and waited >= timeout:
                raise DataError(
                    f"gave up after waiting {waited:.0f} s (lock_timeout={timeout}) for the cache lock "
                    f"{root / key}.lock, held by {holder}: if that process is stuck, stop it; or raise "
                    "lock_timeout (None waits for ever)",
                    step=step,
                ) from None
            log.warning(
                "lightning_order: waiting %.0f s for the cache lock %s.lock, held by %s",
                waited,
                root / key,
                holder,
            )
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.time(),
        "command": " ".join(sys.argv[:2]),
    }
    with contextlib.suppress(OSError):  # a fresh file renamed over the name: a link there is replaced
        replace_file(_holder_path(root, key), json.dumps(info).encode())
    return lock


def _release(lock: FileLock, root: Path, key: str) -> None:
    with contextlib.suppress(OSError):
        _holder_path(root, key).unlink(missing_ok=True)
    lock.release()


def build_once(
    root: Path,
    key: str,
    build: Callable[[Path], None],
    step: str = "prepare_data",
    lock_timeout: float | None = None,
    required: Sequence[str] = (),
) -> None:
    """Builds the cache folder ``root/key`` with ``build(tmp)`` unless an intact one exists.

    ``required`` names the files every prepared folder of the pipeline holds (its spec's
    :attr:`~lightning_order.spec.PipelineSpec.files`): a folder without one is not intact.

    Under the lock: a damaged folder is reported (:class:`CacheWarning` naming each bad file) and
    removed, leftovers of interrupted preparations are removed (and old unlocked ones of other
    configurations, see :func:`remove_stale_others`), ``build`` fills a fresh temporary folder
    (writing the manifest last), and the folder is published. On any error or interruption the
    temporary folder is deleted, so nothing half-written is ever trusted or left behind.

    Raises:
        DataError: the cache path is a file or a symbolic link (refused before any work), the
            cache location cannot be written (full, read-only, denied: the step and the path), or
            the lock was not free within ``lock_timeout`` seconds (its holder named).
    """
    final = root / key
    if is_complete(final, key, required):
        return
    check_cache_path(final)
    try:
        lock = acquire_lock(root, key, lock_timeout, step)
    except OSError as err:
        raise storage_error(err, step, root) or DataError(
            f"cannot create the cache root or its lock at {root} ({err}); " + CACHE_HINT, step=step
        ) from err
    try:
        problems = cache_problems(final, key, required)
        if not problems:
            return
        if final.exists():
            _refuse_foreign(final)
            warnings.warn(
                CacheWarning(
                    f"the prepared data at {final} is damaged and is not trusted: "
                    + "; ".join(problems[:5])
                    + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
                    + "; preparing it anew"
                ),
                stacklevel=3,
            )
        remove_stale(root, key, required)
        remove_stale_others(root, key)
        tmp = None
        try:
            tmp = new_temp_dir(root, key)
            build(tmp)
            publish(tmp, final)
        except BaseException as err:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            with storage_errors(step, tmp or root):
                raise err
    finally:
        _release(lock, root, key)

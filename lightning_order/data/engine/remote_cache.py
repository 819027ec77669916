"""The prepared cache on object storage (``cache_dir="s3://bucket/prefix"``): published with the manifest last.

**Publishing.** Preparation runs as for a local cache, into a staging folder of this machine
(``<user cache>/staging/<hash of cache_dir>/<key>``, published there by
:func:`~.cache.build_once`, every file hashed into the manifest); then this process uploads each
file the manifest lists to ``<cache_dir>/<key>/`` (several at a time), and the manifest LAST,
with a conditional write (``If-None-Match: *``). The manifest is the commit: a folder on the
store without one is not a cache and is never read; the leftovers of a publish that failed
(the store gone mid-way, the process killed) are deleted by the next publish before it uploads.
The staging folder is deleted once the manifest is on the store; after a failed upload it is
kept, so the rerun uploads without preparing again. The LM preparation's work items upload the
large files they write (documents, block shards: :meth:`RemoteCache.put`) as they write them, on
whichever worker runs them; the publisher then uploads only what the store does not hold yet (the
tokenizer, the indexes, the document hashes) and the manifest.

**One preparer per key.** Before preparing, a process creates the lock object
``<cache_dir>/<key>.lock`` with a conditional write: one create wins, the others wait (polling,
naming the holder every :data:`~.cache.LOCK_NOTICE_S` seconds, up to ``lock_timeout``) and reuse
the cache when its manifest appears. The lock holds its holder's host, pid and a lease that a
thread of the holder renews every third of :data:`LEASE_S`. **A crash**: a killed holder leaves
its lock object; a waiter takes it over when its lease has run out (at most :data:`LEASE_S`
after the holder died), at once when the holder was a process of this machine that no longer
exists, or was this very process (an attempt that failed and could not delete its lock, e.g.
the store was unreachable). A holder stalled past its lease loses the lock; its manifest write
then fails (the conditional write) and it reuses the cache the other published. The conditional
writes need a store that honours ``If-None-Match`` (AWS S3 since 2024, MinIO, moto); one that
ignores it lets two preparers publish the same key one after the other, the second's manifest
winning.

**Reading.** :class:`RemoteCache` checks a published cache with one listing (every file the
manifest lists is there with its recorded size) and copies the small files (manifest,
tokenizer, block indexes, document hashes) into a local mirror folder, each verified against
its hash; block shards and documents stay on the store until a rank touches them
(:class:`~.shard_cache.RemoteFiles`, the bounded local cache, verifies them as they arrive).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from lightning_order.data.engine.cache import LOCK_NOTICE_S, default_cache_dir
from lightning_order.data.engine.object_store import object_error, url_filesystem
from lightning_order.data.engine.shard_cache import RemoteFiles
from lightning_order.data.engine.storage import file_digest, replace_file
from lightning_order.errors import CacheWarning, DataError, ManifestError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

log = logging.getLogger(__name__)

__all__ = ["LEASE_S", "POLL_S", "RemoteCache", "publish_prepared", "upload_file"]

#: Seconds a lock object holds without renewal (its holder renews it every third of this).
LEASE_S = 120.0
#: How often a waiting preparer looks at the lock object again (seconds).
POLL_S = 0.5
#: Uploads (and downloads) at a time.
_THREADS = 8
#: The lock tokens this process holds now (another token of this pid is a failed attempt's).
_HELD: set[str] = set()


def publish_prepared(
    preparation: Any,
    config: Any,
    order: Sequence[str],
    hooks: Mapping[str, Any] | None = None,
    required: Sequence[str] = (),
) -> RemoteCache:
    """Prepares ``config`` and publishes it to its ``cache_dir`` on object storage, unless it is there.

    What ``prepare_data`` and the ``prepare`` command run for a URL ``cache_dir``.

    Args:
        preparation: the pipeline's :class:`~lightning_order.spec.Preparation`.
        config: its config (``cache_dir`` a URL; ``storage_options``, ``lock_timeout``).
        order: the data steps that run.
        hooks: the DataModule's own row steps, as for a local cache.
        required: the files every prepared folder of the pipeline holds.

    Returns:
        The published cache.
    """
    remote = RemoteCache(str(config.cache_dir), preparation.cache_key(config, order), config.storage_options)
    remote.publish(
        lambda staging: preparation.prepare_cache(staging, config, order, hooks, required=required),
        required,
        config.lock_timeout,
    )
    return remote


def upload_file(fs: Any, local: Path, url: str) -> None:
    """Uploads one file of a staging folder to ``url`` (the unit the publisher runs several of at once)."""
    fs.put_file(str(local), url)


class RemoteCache:
    """The cache folder of one key on object storage, and its local mirror.

    Args:
        root: ``cache_dir`` (``s3://bucket/prefix``).
        key: the cache key (the folder's name under ``root``).
        storage_options: the filesystem's keyword arguments (``None``: the environment's).
    """

    def __init__(self, root: str, key: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.root = str(root).rstrip("/")
        self.key = key
        self.storage_options = dict(storage_options) if storage_options else None
        self.url = f"{self.root}/{key}"
        self._fs: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None}

    @property
    def fs(self) -> Any:
        """The fsspec filesystem of the store (made on first use)."""
        if self._fs is None:
            self._fs = url_filesystem(self.root, self.storage_options)[0]
        return self._fs

    @property
    def mirror(self) -> Path:
        """The local folder standing for the cache: ``<user cache>/remote/<hash of cache_dir>/<key>``."""
        return default_cache_dir() / "remote" / xxhash.xxh3_64_hexdigest(self.root.encode()) / self.key

    @property
    def staging(self) -> Path:
        """The local root a preparation of this key is staged in before its upload."""
        return default_cache_dir() / "staging" / xxhash.xxh3_64_hexdigest(self.root.encode())

    # -- reading ---------------------------------------------------------------------------
    def _call(self, action: str, url: str, step: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (DataError, FileNotFoundError, FileExistsError):
            raise
        except Exception as err:  # botocore's connection errors are no OSError
            raise object_error(err, url, step, self.storage_options, action) from err

    def identity(self, step: str = "setup") -> str | None:
        """The published build's identity (the manifest's ETag and size); ``None``: no manifest, not a cache."""
        url = f"{self.url}/{MANIFEST_NAME}"
        try:
            info = self._call("read", url, step, lambda: self.fs.info(url, refresh=True))
        except FileNotFoundError:
            return None
        return f"{info.get('ETag') or info.get('etag') or info.get('mtime')}|{info.get('size')}"

    def load_manifest(self, step: str = "setup") -> StepLedger:
        """Downloads the manifest into the mirror (replacing what was there) and loads it (its checksum verified)."""
        url = f"{self.url}/{MANIFEST_NAME}"
        data = self._call("read", url, step, lambda: self.fs.cat_file(url))
        self.mirror.mkdir(parents=True, exist_ok=True)
        replace_file(self.mirror / MANIFEST_NAME, data)
        return StepLedger.load(self.mirror)

    def problems(self, required: Sequence[str] = (), step: str = "prepare_data") -> list[str]:
        """Why the store holds no finished cache of this key: one line per problem (empty: it does).

        One listing: the manifest loads and is of this key, every file of ``required`` is there,
        and every file it lists is there with its recorded size (hashes are verified as files
        are read).
        """
        if self.identity(step) is None:
            return [f"{MANIFEST_NAME}: missing"]
        try:
            ledger = self.load_manifest(step)
        except FileNotFoundError:
            return [f"{MANIFEST_NAME}: missing"]
        except ManifestError as err:
            return [f"{MANIFEST_NAME}: {err}"]
        if ledger.info.get("cache_key") != self.key:
            return [f"{MANIFEST_NAME}: of cache key {ledger.info.get('cache_key')!r}, not {self.key!r}"]
        sizes = self.sizes(step)
        out = [
            f"{name}: missing"
            for name in required
            if name not in sizes and not any(found.startswith(f"{name}/") for found in sizes)
        ]
        records = ledger.info.get("files") or {}
        if not records:
            out.append("the manifest lists no file hashes: it cannot be verified")
        for name, record in sorted(records.items()):
            if name not in sizes:
                out.append(f"{name}: missing")
            elif sizes[name] != int(record.get("size", -1)):
                out.append(f"{name}: {sizes[name]} bytes, expected {int(record.get('size', -1))}")
        return out

    def sizes(self, step: str = "prepare_data") -> dict[str, int]:
        """What the store holds under this key now, by relative path: its size in bytes (one listing)."""
        prefix = self.fs._strip_protocol(self.url).rstrip("/") + "/"
        self.fs.invalidate_cache(self.url)  # another process may have written since the last listing
        listing = self._call("list", self.url, step, lambda: self.fs.find(self.url, detail=True))
        return {name[len(prefix) :]: int(info.get("size") or 0) for name, info in listing.items()}

    def files(self, ledger: StepLedger) -> RemoteFiles:
        """The fetcher of this cache's large files into the bounded local cache (``<user cache>/shards``)."""
        return RemoteFiles(
            self.url,
            self.mirror,
            ledger.info.get("files") or {},
            default_cache_dir() / "shards",
            self.storage_options,
        )

    def sync(self, ledger: StepLedger, names: Iterable[str], step: str = "setup") -> Path:
        """Copies the files ``names`` (relative paths the manifest lists) into the mirror, each verified.

        A file already there with the recorded size and hash is kept; another is fetched to a
        temporary file, verified, and renamed into place.

        Raises:
            DataError: a file differs from its record (named: it changed after publishing), or the
                store cannot be read.
        """
        records = ledger.info.get("files") or {}
        todo = []
        for name in names:
            record = records[name]
            local = self.mirror / name
            with contextlib.suppress(OSError):
                if local.stat().st_size == int(record["size"]) and file_digest(local) == record["xxh3"]:
                    continue
            todo.append(name)

        def fetch(name: str) -> None:
            url = f"{self.url}/{name}"
            data = self._call("read", url, step, lambda: self.fs.cat_file(url))
            record = records[name]
            if len(data) != int(record["size"]) or xxhash.xxh3_128_hexdigest(data) != record["xxh3"]:
                raise DataError(
                    f"the prepared file {url} changed after it was published ({len(data)} bytes, the manifest "
                    f"says {int(record['size'])}; or its xxh3 hash differs): it is not used; prepare the data again "
                    "(delete that cache folder's manifest.json on the store, or choose another cache_dir)",
                    step=step,
                )
            (self.mirror / name).parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.mirror / name, data)

        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(fetch, todo))
        return self.mirror

    # -- publishing ------------------------------------------------------------------------
    def publish(
        self,
        build: Callable[[Path], Path],
        required: Sequence[str] = (),
        lock_timeout: float | None = None,
        step: str = "prepare_data",
    ) -> None:
        """Prepares (``build(staging root) -> folder``) and publishes this key unless the store holds it.

        Raises:
            DataError: the store cannot be written or read (the object named), or the lock was not
                free within ``lock_timeout`` seconds (its holder named).
        """
        if not self.problems(required, step):
            return
        token = self._acquire(lock_timeout, required, step)
        if token is None:
            return  # another process published it while this one waited
        try:
            problems = self.problems(required, step)
            if not problems:
                return
            if problems != [f"{MANIFEST_NAME}: missing"]:
                warnings.warn(
                    CacheWarning(
                        f"the prepared data at {self.url} is damaged and is not trusted: "
                        + "; ".join(problems[:5])
                        + "; preparing it anew"
                    ),
                    stacklevel=3,
                )
            # Un-commit first, then clear: a reader never sees a manifest over half the files.
            self._call(
                "delete",
                self.url,
                step,
                lambda: self.fs.rm(self.url, recursive=True) if self.fs.exists(self.url) else None,
            )
            folder = build(self.staging)
            self._upload(folder, step)
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            self._release(token)

    def put(self, local: Path, name: str, step: str = "prepare_data") -> None:
        """Uploads the staged file ``local`` as ``<url>/<name>`` (no commit: only the manifest commits).

        What the publisher runs for each file, and a work item for the file it wrote (an LM
        preparation's documents and block shards), so that the driver does not upload them.

        Raises:
            DataError: the store cannot be written (the object named).
        """
        url = f"{self.url}/{name}"
        self._call("write", url, step, lambda: upload_file(self.fs, Path(local), url))

    def _upload(self, folder: Path, step: str) -> None:
        """Every file the staged manifest lists that is not on the store yet, then the manifest (conditional: the commit).

        A file the store holds with its recorded size was uploaded by a work item of this very
        publish (:meth:`put`): the leftovers of earlier attempts were deleted before the build.
        """
        records = StepLedger.load(folder).info.get("files") or {}
        there = self.sizes(step)
        names = [name for name in sorted(records) if there.get(name) != int(records[name]["size"])]

        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(lambda name: self.put(folder / name, name, step), names))
        url = f"{self.url}/{MANIFEST_NAME}"
        data = (folder / MANIFEST_NAME).read_bytes()
        try:
            self._call("write", url, step, lambda: self._create(url, data))
        except FileExistsError:
            log.info("lightning_order: %s was published by another process meanwhile; it is reused", self.url)

    def _create(self, url: str, data: bytes) -> None:
        """Writes ``url`` only if no object has its name (``If-None-Match: *``): ``FileExistsError`` otherwise."""
        if self.fs.protocol in ("s3", "s3a") or "s3" in tuple(self.fs.protocol):
            self.fs.pipe_file(url, data, IfNoneMatch="*")
        elif self.fs.exists(url):  # a store without conditional writes: check, then write (not atomic)
            raise FileExistsError(url)
        else:
            self.fs.pipe_file(url, data)

    # -- the lock object -------------------------------------------------------------------
    @property
    def lock_url(self) -> str:
        """The lock object of this key: ``<cache_dir>/<key>.lock``."""
        return f"{self.url}.lock"

    def _lock_body(self, token: str) -> bytes:
        return json.dumps(
            {
                "token": token,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "expires": time.time() + LEASE_S,
                "command": " ".join(sys.argv[:2]),
            }
        ).encode()

    def _holder(self, step: str) -> dict[str, Any] | None:
        try:
            data = self._call("read", self.lock_url, step, lambda: self.fs.cat_file(self.lock_url))
            holder = json.loads(data)
        except FileNotFoundError:
            return None
        except ValueError:
            return {}
        return holder if isinstance(holder, dict) else {}

    def _stale(self, holder: Mapping[str, Any]) -> bool:
        """A lock whose lease ran out, or whose holder on this machine is gone (or is a failed attempt of this process)."""
        if float(holder.get("expires", 0) or 0) < time.time():
            return True
        if holder.get("host") != socket.gethostname():
            return False
        pid = holder.get("pid")
        if pid == os.getpid():
            return holder.get("token") not in _HELD
        if isinstance(pid, int):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except OSError:
                return False
        return False

    def _acquire(self, timeout: float | None, required: Sequence[str], step: str) -> str | None:
        """Creates the lock object (waiting for a holder); ``None`` when the cache was published meanwhile."""
        token = uuid.uuid4().hex
        start = last_notice = time.monotonic()
        while True:
            try:
                self._call(
                    "write", self.lock_url, step, lambda: self._create(self.lock_url, self._lock_body(token))
                )
                break
            except FileExistsError:
                pass
            holder = self._holder(step)
            if holder is not None and self._stale(holder):
                log.warning(
                    "lightning_order: taking over the stale lock %s (%s)", self.lock_url, _describe(holder)
                )
                with contextlib.suppress(FileNotFoundError):
                    self._call("delete", self.lock_url, step, lambda: self.fs.rm(self.lock_url))
                continue
            if holder is not None and not self.problems(required, step):
                return None
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                raise DataError(
                    f"gave up after waiting {waited:.0f} s (lock_timeout={timeout}) for the lock object "
                    f"{self.lock_url}, held by {_describe(holder or {})}: if that process is stuck, stop it "
                    f"(its lease runs out {LEASE_S:.0f} s after its last renewal); or raise lock_timeout",
                    step=step,
                )
            if time.monotonic() - last_notice >= LOCK_NOTICE_S:
                last_notice = time.monotonic()
                log.warning(
                    "lightning_order: waiting %.0f s for the lock object %s, held by %s",
                    waited,
                    self.lock_url,
                    _describe(holder or {}),
                )
            time.sleep(POLL_S)
        _HELD.add(token)
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(token, stop), daemon=True)
        renewer.start()
        self._renewers = getattr(self, "_renewers", {})
        self._renewers[token] = (stop, renewer)
        return token

    def _renew(self, token: str, stop: threading.Event) -> None:
        """Extends the lease every third of :data:`LEASE_S` until told to stop (best effort)."""
        while not stop.wait(LEASE_S / 3):
            with contextlib.suppress(Exception):
                self.fs.pipe_file(self.lock_url, self._lock_body(token))

    def _release(self, token: str) -> None:
        """Stops the renewal and deletes the lock object (best effort: a stale lock is taken over later)."""
        stop, renewer = self._renewers.pop(token)
        stop.set()
        renewer.join()
        with contextlib.suppress(Exception):
            holder = self._holder("prepare_data")
            if holder is not None and holder.get("token") == token:
                self.fs.rm(self.lock_url)
        _HELD.discard(token)


def _describe(holder: Mapping[str, Any]) -> str:
    if not holder:
        return "another process (it wrote no details)"
    left = float(holder.get("expires", 0) or 0) - time.time()
    return (
        f"process {holder.get('pid')} on {holder.get('host')} ({holder.get('command', '?')}), "
        f"its lease {'running' if left > 0 else 'out'} ({left:.0f} s left)"
    )

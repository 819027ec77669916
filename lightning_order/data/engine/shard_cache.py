"""A bounded local cache of files fetched from a prepared cache on object storage.

Training from ``cache_dir="s3://..."`` reads each block shard from the store once per machine:
:class:`RemoteFiles` fetches a file on first touch into a folder of this machine
(``<user cache>/shards/``, the user's cache folder: ``$LIGHTNING_ORDER_CACHE`` or
``~/.cache/lightning_order``), verifies its size and xxh3 hash against the manifest's record
while it streams (a file changed on the store after publishing is refused, named), and renames
it into place. Files are named by their recorded hash, so the ranks and loader workers of a
machine share one copy, and a second epoch (or a second run) reads what is still there without
a request.

The folder is bounded: before a fetch, the least recently used files are deleted until the new
one fits in :func:`shard_cache_limit` bytes (``$LIGHTNING_ORDER_SHARD_CACHE_BYTES``, default
:data:`DEFAULT_SHARD_CACHE_BYTES`); a hit refreshes a file's modification time, which is the
order of eviction. The trade-offs: a shard is fetched whole (a rank touching one block of a shard
downloads all of it; with the ranks of a machine sharing the folder, a machine fetches each shard
once per epoch at most, one process fetching while the others wait for it); a single shard larger than the limit is still fetched (the limit is
exceeded by that one file); a file already in the folder is trusted by its name (it was verified
when it was fetched) and is not hashed again.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import xxhash
from filelock import FileLock

from lightning_order.data.engine.object_store import object_error, url_filesystem
from lightning_order.errors import DataError

__all__ = [
    "DEFAULT_SHARD_CACHE_BYTES",
    "SHARD_CACHE_ENV",
    "RemoteFiles",
    "fetched_bytes",
    "shard_cache_limit",
]

#: The environment variable that sets the local cache's size limit, in bytes.
SHARD_CACHE_ENV = "LIGHTNING_ORDER_SHARD_CACHE_BYTES"
#: The local cache's size limit when the variable is not set: 32 GiB.
DEFAULT_SHARD_CACHE_BYTES = 32 * 2**30
_CHUNK = 1 << 22
#: Bytes this process fetched from object storage (all :class:`RemoteFiles`), for measurements.
_FETCHED = [0]


def shard_cache_limit() -> int:
    """The size limit of the local cache (``$LIGHTNING_ORDER_SHARD_CACHE_BYTES`` or the default).

    Raises:
        DataError: the variable is not a whole number of bytes >= 0.
    """
    text = os.environ.get(SHARD_CACHE_ENV)
    if text is None or not text.strip():
        return DEFAULT_SHARD_CACHE_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise DataError(
            f"${SHARD_CACHE_ENV}={text!r} is not a number of bytes >= 0; e.g. {SHARD_CACHE_ENV}={DEFAULT_SHARD_CACHE_BYTES}",
            step="setup",
        )
    return value


def fetched_bytes() -> int:
    """The bytes this process has fetched from object storage into local caches so far."""
    return _FETCHED[0]


class RemoteFiles:
    """Fetches files of a prepared cache on object storage into the bounded local cache.

    Called with the path a file would have in the local mirror of the cache folder; returns the
    path of a verified local copy. Picklable (a loader worker makes its own connection).

    Args:
        url: the cache folder on the store (``s3://bucket/prefix/<key>``).
        mirror: the local folder that stands for it (file paths are given under it).
        records: the manifest's ``{relative path: {"size", "xxh3"}}``.
        folder: the local cache folder (shared by every cache and process of this machine).
        storage_options: the filesystem's keyword arguments (``None``: the environment's).
        limit: the local cache's size limit in bytes (``None``: :func:`shard_cache_limit`).
    """

    def __init__(
        self,
        url: str,
        mirror: Path,
        records: Mapping[str, Mapping[str, Any]],
        folder: Path,
        storage_options: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.mirror = Path(mirror)
        self.records = {str(k): dict(v) for k, v in records.items()}
        self.folder = Path(folder)
        self.storage_options = dict(storage_options) if storage_options else None
        self.limit = shard_cache_limit() if limit is None else int(limit)
        self._fs: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None}  # a connection is never pickled

    def _filesystem(self) -> Any:
        if self._fs is None:
            self._fs = url_filesystem(self.url, self.storage_options)[0]
        return self._fs

    def local_name(self, name: str) -> Path:
        """Where the copy of the cache file ``name`` (relative path) lives locally: named by its hash."""
        record = self._record(name)
        return self.folder / f"{record['xxh3']}-{int(record['size'])}{PurePosixPath(name).suffix}"

    def _record(self, name: str) -> Mapping[str, Any]:
        record = self.records.get(name)
        if record is None:
            raise DataError(
                f"{self.url}/{name} is not listed in the manifest of the prepared data; it was written by "
                "another version: prepare the data again",
                step="setup",
            )
        return record

    def __call__(self, path: str | os.PathLike[str]) -> Path:
        """A verified local copy of the cache file at ``path`` (under :attr:`mirror`), fetched when absent."""
        name = Path(path).relative_to(self.mirror).as_posix()
        target = self.local_name(name)
        size = int(self._record(name)["size"])
        if self._hit(target, size):
            return target
        (self.folder / ".locks").mkdir(parents=True, exist_ok=True)
        # One process of the machine fetches a file; the ranks and workers that want it meanwhile
        # wait for it and then find it (an empty lock file per copy, in .locks/).
        with FileLock(str(self.folder / ".locks" / f"{target.name}.lock")):
            if not self._hit(target, size):
                self._make_room(size)
                self._fetch(name, target)
        return target

    @staticmethod
    def _hit(target: Path, size: int) -> bool:
        """Whether the copy is there (then it becomes the most recently used)."""
        try:
            if target.stat().st_size == size:
                os.utime(target)
                return True
        except FileNotFoundError:
            pass
        return False

    def _make_room(self, size: int) -> None:
        """Deletes the least recently used copies until ``size`` more bytes fit in the limit."""
        entries = []
        for entry in os.scandir(self.folder):
            if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                continue  # a fetch under way (its temporary file) is never evicted
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat(follow_symlinks=False)
                entries.append((info.st_mtime_ns, info.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, count, victim in sorted(entries):
            if total + size <= self.limit:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(victim)  # a map of it in another process stays valid (the inode lives on)
            total -= count

    def _fetch(self, name: str, target: Path) -> None:
        """Streams ``name`` into ``target`` through a temporary file, hashing as it goes."""
        record = self._record(name)
        url = f"{self.url}/{name}"
        temp = self.folder / f".{target.name}.{uuid.uuid4().hex[:8]}.part"
        digest = xxhash.xxh3_128()
        count = 0
        try:
            try:
                with (
                    self._filesystem().open(url, "rb", block_size=_CHUNK) as source,
                    open(temp, "wb") as sink,
                ):
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        sink.write(chunk)
                        count += len(chunk)
            except DataError:
                raise
            except Exception as err:  # botocore's connection errors are no OSError
                if isinstance(err, OSError) and err.filename and str(temp) in str(err.filename):
                    raise DataError(
                        f"cannot write the local copy {temp} of {url} ({err}); free space there, or lower "
                        f"${SHARD_CACHE_ENV}",
                        step="setup",
                    ) from err
                raise object_error(err, url, "setup", self.storage_options) from err
            finally:
                _FETCHED[0] += count
            if count != int(record["size"]) or digest.hexdigest() != record.get("xxh3"):
                raise DataError(
                    f"the prepared file {url} changed after it was published ({count} bytes, the manifest "
                    f"says {int(record['size'])}; or its xxh3 hash differs): it is not used; prepare the data "
                    "again (delete that cache folder's manifest.json on the store, or choose another cache_dir)",
                    step="setup",
                )
            os.replace(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

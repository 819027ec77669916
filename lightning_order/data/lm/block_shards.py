"""Packed blocks as shards: one ``.npy`` file per ``pack`` task, and the index that joins them.

``pack`` has each task write the whole blocks of its partition into a file of its own (a new
file under a temporary name, then renamed: no two processes ever write one file, and no row is
written through a shared memory map, which NFS and FUSE mounts do not make safe). The driver
writes the partitions' joined tails as one more shard per source, and an index
(``index.json``: each shard's file and block count, in the global block order). The blocks of a
split are the shards' concatenation in index order, the same rows as one block file would hold.

:class:`ShardedBlocks` reads them: each shard memory-mapped read-only when first touched; what
a process holds is the index (O(partitions)), never a structure that grows with the blocks. For
a cache on object storage, ``fetch`` gives the local copy of a shard (fetched and verified into
the bounded local cache on first touch: :class:`~lightning_order.data.engine.shard_cache.RemoteFiles`);
the maps of copies evicted since are dropped when the next shard is opened, so what a process
maps stays within that cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.data.engine.storage import replace_file, save_array
from lightning_order.errors import DataError

__all__ = ["INDEX_NAME", "ShardedBlocks", "write_index", "write_shard"]

#: The index of a split's block shards (inside its ``blocks/`` folder).
INDEX_NAME = "index.json"
#: The ``format`` of the index file.
_FORMAT = "lightning_order.block-shards"


def write_shard(path: str | os.PathLike[str], blocks: np.ndarray) -> None:
    """Writes ``blocks`` (``n × width`` int32) to ``path`` atomically: a new temporary file, then a rename.

    A task run twice (a retried Ray task) replaces its own shard whole; a reader never sees half of one.
    """
    temp = f"{os.fspath(path)}.tmp-{os.getpid()}"
    save_array(temp, np.ascontiguousarray(blocks, dtype=np.int32))
    os.replace(temp, path)


def write_index(folder: Path, shards: Sequence[tuple[str, int]]) -> None:
    """Writes ``folder/index.json``: the shards (file name, block count) in the global block order, and their width.

    The width (tokens per block) is the shards' own, read from their headers: every shard must
    hold the ``rows × width`` int32 array the index will say.

    Raises:
        DataError: no shard, or shards of other widths or row counts than listed.
    """
    shapes = {name: np.load(folder / name, mmap_mode="r").shape for name, _ in shards}
    widths = {shape[1] for shape in shapes.values() if len(shape) == 2}
    wrong = [name for name, rows in shards if len(shapes[name]) != 2 or shapes[name][0] != rows]
    if len(widths) != 1 or wrong:
        raise DataError(
            f"the block shards of {folder} are not one n × width array ({len(shards)} shards, widths "
            f"{sorted(widths)}, rows unlike the index: {wrong}); a task wrote the wrong blocks: delete the folder and run again",
            step="pack",
        )
    data = {
        "format": _FORMAT,
        "version": 1,
        "width": int(widths.pop()),
        "shards": [{"file": name, "rows": int(rows)} for name, rows in shards],
    }
    replace_file(folder / INDEX_NAME, json.dumps(data).encode())


class ShardedBlocks:
    """The blocks of one split, read through the index of its shards (memory-mapped per shard, read-only).

    Indexed like an ``n × width`` array: ``blocks[i]`` (one block), ``blocks[rows]`` (an int
    array: a batch, in that order), ``blocks[a:b]``; ``np.asarray(blocks)`` joins all of them
    (for small splits and tests).

    Args:
        folder: the split's ``blocks/`` folder.
        shards: ``(file name, block count)`` per shard, in the global block order.
        width: tokens per block (the index's: the shards' own).
        fetch: for a cache on object storage, the local copy of the shard at a path under
            ``folder`` (``None``: the shards are in ``folder``).
    """

    dtype = np.dtype(np.int32)

    def __init__(
        self,
        folder: str | os.PathLike[str],
        shards: Sequence[tuple[str, int]],
        width: int,
        fetch: Callable[[Path], Path] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.fetch = fetch
        self.files = tuple(str(name) for name, _ in shards)
        self.counts = tuple(int(rows) for _, rows in shards)
        self.width = int(width)
        self._starts = np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]).astype(np.int64)
        self._maps: dict[int, np.ndarray] = {}
        self._paths: dict[int, Path] = {}

    @classmethod
    def open(cls, folder: str | os.PathLike[str], fetch: Callable[[Path], Path] | None = None) -> ShardedBlocks:
        """The shards that ``folder/index.json`` lists.

        Raises:
            DataError: the index is missing, unreadable or not of this format (naming the file).
        """
        path = Path(folder) / INDEX_NAME
        try:
            data = json.loads(path.read_text())
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {_FORMAT!r}")
            shards = [(str(s["file"]), int(s["rows"])) for s in data["shards"]]
            width = int(data["width"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DataError(
                f"the block index {path} cannot be read ({type(err).__name__}: {err}); the prepared data is damaged "
                "or was written by another version: delete that folder and run again",
                step="setup",
            ) from err
        return cls(folder, shards, width, fetch)

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(blocks, width)``, as the joined array's."""
        return len(self), self.width

    @property
    def ndim(self) -> int:
        """2, as the joined array's."""
        return 2

    def shard(self, s: int) -> np.ndarray:
        """Shard ``s``, memory-mapped read-only (opened once per process).

        Raises:
            DataError: the file is missing, unreadable, or not the ``rows × width`` int32 array the index says.
        """
        found = self._maps.get(s)
        if found is not None:
            return found
        path = self.folder / self.files[s]
        if self.fetch is not None:
            path = self.fetch(path)
            for other, mapped in list(self._paths.items()):  # copies evicted since: their maps go too
                if not mapped.exists():
                    self._maps.pop(other, None)
                    self._paths.pop(other, None)
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as err:
            raise _damaged(path, f"{type(err).__name__}: {err}") from err
        if array.dtype != self.dtype or array.shape != (self.counts[s], self.width):
            raise _damaged(
                path,
                f"a {array.dtype} array of shape {array.shape}, the index says "
                f"({self.counts[s]}, {self.width}) int32",
            )
        self._maps[s] = array
        self._paths[s] = path
        return np.asarray(array)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            key = np.arange(len(self), dtype=np.int64)[key]
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if int(key) < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"block {int(key)} is out of range for {len(self)} blocks")
            s = int(np.searchsorted(self._starts, i, side="right")) - 1
            return np.asarray(self.shard(s)[i - int(self._starts[s])])
        rows = np.asarray(key, dtype=np.int64)
        flat = np.where(rows < 0, rows + len(self), rows).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"a block index is out of range for {len(self)} blocks")
        out = np.empty((flat.size, self.width), dtype=self.dtype)
        owners = np.searchsorted(self._starts, flat, side="right") - 1
        for s in np.unique(owners).tolist():  # one fancy index per shard a batch touches
            where = np.flatnonzero(owners == s)
            out[where] = self.shard(s)[flat[where] - self._starts[s]]
        return out.reshape(*rows.shape, self.width)

    def __iter__(self) -> Iterator[np.ndarray]:
        for s in range(len(self.files)):
            yield from self.shard(s)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        parts = [np.asarray(self.shard(s)) for s in range(len(self.files))]
        out = np.concatenate([np.empty((0, self.width), self.dtype), *parts])
        return out if dtype is None else out.astype(dtype)

    def __getstate__(self) -> dict[str, Any]:
        # a loader worker started by spawn opens its own maps; pickling a map would copy the data
        return {**self.__dict__, "_maps": {}, "_paths": {}}


def _damaged(path: Path, what: str) -> DataError:
    return DataError(
        f"the block shard {path} is damaged ({what}); it changed after it was verified: delete the prepared "
        "folder and run again",
        step="setup",
    )

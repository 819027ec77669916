"""The LM cache's large files put in place and hashed on the workers, not on the driver.

Writing the cache used to read every partition's document hashes into one array on the driver
(8 bytes a document) and hash every file of the folder there (the whole corpus's documents and
blocks, serially). Here each work item places one partition's documents (a rename, or a write
when rows were dropped since) and hashes that file, writes the partition's document hashes to a
scratch file, or hashes one block shard; the driver joins the hash files into ``doc_hashes.npy``
a part at a time (:func:`~lightning_order.data.engine.storage.concatenate_arrays`) and keeps
only the records (size and xxh3 per file) the manifest lists, exactly as
:func:`~lightning_order.data.engine.storage.file_records` would list them.

For a cache published to object storage, an item that carries the ``store`` (the
:class:`~lightning_order.data.engine.remote_cache.RemoteCache` of the key, its storage options
held in memory) also uploads the file it placed or hashed, under its ``name`` in the cache folder:
the documents and block shards go from the workers straight to the store, and the publisher
uploads the rest (:meth:`~lightning_order.data.engine.remote_cache.RemoteCache.put`). The upload
runs after the file is final, so a task Ray retries uploads it whole again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lightning_order.data.engine.keys import key_hash_array
from lightning_order.data.engine.partitions import DocumentSet, write_table
from lightning_order.data.engine.remote_cache import RemoteCache
from lightning_order.data.engine.storage import file_digest, save_array

__all__ = ["hash_file", "place_documents", "record_of", "upload"]


def place_documents(item: dict[str, Any]) -> dict[str, Any]:
    """Puts one partition's documents in the cache and writes their hashes to scratch (one work item).

    Item keys: ``documents`` (the split's :class:`DocumentSet`), ``partition``, ``dest`` (the
    file in the cache), ``hashes`` (the scratch ``.npy`` of the partition's ``doc_hash``); for a
    cache on object storage, ``store`` and ``name`` (the file's relative path there).

    Returns:
        ``rows`` and ``record`` (``{"size", "xxh3"}`` of the placed file).
    """
    docs: DocumentSet = item["documents"]
    p = int(item["partition"])
    target = Path(item["dest"])
    table = docs.read(p)
    source = docs.path(p)
    if "doc_hash" in table.column_names and docs.mask(p) is None and source.exists():
        os.replace(source, target)  # the file as it is (read unmasked: its own columns): a rename
    else:
        if "doc_hash" not in table.column_names:  # cleaned again after the split (a wrong order)
            table = table.append_column(
                "doc_hash", pa.array(key_hash_array(table.column("text"), text=True).view(np.int64))
            )
        write_table(table, target)
    save_array(item["hashes"], table.column("doc_hash").to_numpy().astype(np.int64))
    record = record_of(target)
    upload(item, target)
    return {"rows": table.num_rows, "record": record}


def hash_file(item: dict[str, Any]) -> dict[str, Any]:
    """The manifest record of one file (item key ``path``): ``{"record": {"size", "xxh3"}}``.

    With ``store`` and ``name`` (a cache on object storage), the file is also uploaded there.
    """
    path = Path(item["path"])
    record = record_of(path)
    upload(item, path)
    return {"record": record}


def upload(item: dict[str, Any], path: Path) -> None:
    """Uploads ``path`` to the item's ``store`` as its ``name`` (nothing for an item without a store)."""
    store: RemoteCache | None = item.get("store")
    if store is not None:
        store.put(path, str(item["name"]))


def record_of(path: Path) -> dict[str, Any]:
    """``{"size", "xxh3"}`` of ``path``: one entry of :func:`~lightning_order.data.engine.storage.file_records`."""
    return {"size": path.stat().st_size, "xxh3": file_digest(path)}

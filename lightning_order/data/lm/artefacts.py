"""The files of a prepared LM cache folder, and reading them back.

The folder is published by :func:`lightning_order.data.engine.cache.build_once` like the
classification cache (temporary folder, manifest last, atomic rename, every file hashed in the
manifest and verified before use). Per split (``train/``, ``val/``):

* ``blocks/``: the packed blocks, int32, ``n × (block_size + 1)`` in all, as shards (one
  ``.npy`` per ``pack`` task, and the joined tails) and the ``index.json`` that orders them
  (:mod:`~lightning_order.data.lm.block_shards`), memory-mapped per shard when read;
* ``documents/part-<p>.arrow``: the cleaned, deduplicated documents of partition ``p``, in the
  canonical order (Arrow IPC, memory-mapped; ``dm.documents(split)`` reads them lazily);
* ``doc_hashes.npy``: int64, the unseeded hash of each document's split key, in the same order
  (the validator's train/validation overlap check).

And ``tokenizer.json``. The scratch files of the steps are moved into place (a rename, on the same
file system), never copied.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.data.engine.cache import TEMP_MARKER
from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.engine.object_store import is_url
from lightning_order.data.engine.partitions import DocumentSet, PartitionedTexts
from lightning_order.data.engine.remote_cache import RemoteCache
from lightning_order.data.engine.runner import DataState
from lightning_order.data.engine.storage import concatenate_arrays, storage_errors
from lightning_order.data.lm.block_shards import INDEX_NAME, ShardedBlocks
from lightning_order.data.lm.config import padded_size
from lightning_order.data.lm.publishing import hash_file, place_documents, record_of
from lightning_order.errors import DataError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

__all__ = ["SPLITS", "read_blocks", "read_documents", "write_lm_prepared"]

SPLITS: tuple[str, ...] = ("train", "val")


def write_lm_prepared(
    folder: Path, state: DataState, ledger: StepLedger, config: Any, engine: Any = None
) -> None:
    """Writes the packed splits, the documents and the tokenizer, then the manifest (last).

    The manifest's ``info`` receives the dims (``vocab_size``, ``padded_vocab_size``,
    ``block_size``), the end-of-text token and id, the documents per file of each split, and the
    data fingerprints (``manifest``, ``split``, ``vocab``, ``corpus``), the BOS (``bos_token``,
    ``bos_id``) and the special tokens a Hugging Face tokenizer of the data declares (``special_tokens``).

    The documents are placed, and every large file hashed, by ``engine``'s workers
    (:mod:`.publishing`; ``None``: this process): the driver holds the records and the counts,
    never the documents' hashes or the files' bytes.
    """
    documents = state.extra.get("documents", {})
    counts: dict[str, list[int]] = {}
    records: dict[str, dict[str, Any]] = {}
    engine = engine if engine is not None else LocalEngine(1)
    # A cache_dir on object storage: this folder is the staging of its publish, and the workers
    # upload the large files they place or hash (remote_cache uploads the rest, then the manifest).
    store = (
        RemoteCache(str(config.cache_dir), str(ledger.info["cache_key"]), config.storage_options)
        if config.cache_dir is not None and is_url(str(config.cache_dir))
        else None
    )
    with storage_errors("save", folder):
        for name in SPLITS:
            (folder / name).mkdir()
            counts[name], placed = _place_documents(
                engine, documents[name], folder / name, folder / "work", store
            )
            records.update(placed)
            _move_blocks(state.parts[name], folder / name / "blocks")
            records.update(_hash_files(engine, folder, state.parts[name].files, name, store))
        state.tokenizer.save(str(folder / "tokenizer.json"))
    size = state.tokenizer.get_vocab_size(with_added_tokens=True)
    multiple = config.pad_vocab_multiple
    fps = {"manifest": ledger.fingerprint}
    for key, step in (("split", "split"), ("vocab", "build_vocab")):
        fps[key] = record.output if (record := ledger.latest(step)) else ""
    load = ledger.latest("load")
    fps["corpus"] = str(load.params.get("corpus", "")) if load is not None else ""
    ledger.info.update(
        # block_size is the config's, as pack cut by it: never read back from the blocks' width.
        dims={
            "vocab_size": size,
            "padded_vocab_size": padded_size(size, multiple),
            "block_size": config.block_size,
        },
        pad_vocab_multiple=multiple,
        eos_token=config.eos_token,
        eos_id=state.tokenizer.token_to_id(config.eos_token),
        **_document_start(ledger),
        documents=counts,
        data_fingerprints=fps,
    )
    ledger.info["files"] = _records(folder, records)
    with storage_errors("save", folder):
        ledger.save(folder)


def _move_blocks(blocks: ShardedBlocks, dest: Path) -> None:
    """Moves the shards the index lists, and the index, into ``dest`` (renames: nothing else of the scratch folder)."""
    dest.mkdir()
    for name in (*blocks.files, INDEX_NAME):
        os.replace(blocks.folder / name, dest / name)


def _place_documents(
    engine: Any, docs: DocumentSet, split_folder: Path, work: Path, store: RemoteCache | None = None
) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """Each partition's documents placed and hashed by a worker, then ``doc_hashes.npy`` joined a part at a time.

    With ``store`` (a cache on object storage), each worker also uploads the file it placed.

    Returns:
        the rows per partition, and the manifest records of the files placed (by their names
        under the cache folder).
    """
    dest = split_folder / "documents"
    dest.mkdir(parents=True)
    scratch = work / "publish" / split_folder.name
    scratch.mkdir(parents=True, exist_ok=True)
    prefix = f"{split_folder.name}/documents"
    items = [
        {
            "documents": docs,
            "partition": p,
            "dest": str(dest / f"part-{p:05d}.arrow"),
            "hashes": str(scratch / f"hashes-{p:05d}.npy"),
            **_upload_to(store, f"{prefix}/part-{p:05d}.arrow"),
        }
        for p in range(docs.count)
    ]
    placed = engine.map(place_documents, items, desc=f"publish {split_folder.name} documents")
    concatenate_arrays(split_folder / "doc_hashes.npy", [item["hashes"] for item in items], np.int64)
    records = {f"{prefix}/part-{p:05d}.arrow": result["record"] for p, result in enumerate(placed)}
    return [int(result["rows"]) for result in placed], records


def _hash_files(
    engine: Any, folder: Path, names: Any, split: str, store: RemoteCache | None = None
) -> dict[str, dict[str, Any]]:
    """The manifest records of a split's block shards, each hashed (and uploaded to ``store``) by a worker."""
    paths = [folder / split / "blocks" / name for name in names]
    items = [{"path": str(path), **_upload_to(store, path.relative_to(folder).as_posix())} for path in paths]
    hashed = engine.map(hash_file, items, desc=f"hash {split} blocks")
    return {path.relative_to(folder).as_posix(): result["record"] for path, result in zip(paths, hashed)}


def _upload_to(store: RemoteCache | None, name: str) -> dict[str, Any]:
    """The item keys that make a worker upload its file as ``name`` (none without a store)."""
    return {} if store is None else {"store": store, "name": name}


def _records(folder: Path, known: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What :func:`~lightning_order.data.engine.storage.file_records` lists, with the workers' records reused.

    Every file of the folder is listed (the manifest, the marker and the scratch aside); a file
    no worker hashed (the tokenizer, the index, ``doc_hashes.npy``: small) is hashed here.
    """
    out = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if (
            path.is_file()
            and not path.is_symlink()
            and name.split("/")[0] not in (MANIFEST_NAME, TEMP_MARKER, "work")
        ):
            out[name] = known[name] if name in known else record_of(path)
    return out


def _document_start(ledger: StepLedger) -> dict[str, Any]:
    """``bos_token``, ``bos_id`` and the Hugging Face ``special_tokens`` ``build_vocab`` decided (:mod:`.bos`)."""
    record = ledger.latest("build_vocab")
    stats = record.stats if record is not None else {}
    return {
        "bos_token": record.params.get("bos_token") if record is not None else None,
        "bos_id": stats.get("bos_id"),
        "special_tokens": dict(stats.get("hf_special_tokens") or {}),
    }


def _unreadable(path: Path, err: Exception) -> DataError:
    return DataError(
        f"the prepared data at {path} cannot be read ({type(err).__name__}: {err}); it changed after it was "
        "verified: delete that folder and run again",
        step="setup",
    )


def read_blocks(path: Path, fetch: Callable[[Path], Path] | None = None) -> dict[str, Any]:
    """The packed splits (:class:`~.block_shards.ShardedBlocks`: each shard memory-mapped when read) and
    each split's document hashes (memory-mapped ``int64``: a rank never loads them whole).

    ``fetch``: for a cache on object storage, the local copy of a block shard (see :class:`~.block_shards.ShardedBlocks`).
    """
    out: dict[str, Any] = {}
    try:
        for name in SPLITS:
            out[name] = ShardedBlocks.open(path / name / "blocks", fetch)
            out[f"{name}_doc_hashes"] = np.load(path / name / "doc_hashes.npy", mmap_mode="r")
    except (OSError, ValueError) as err:
        raise _unreadable(path, err) from err
    return out


def read_documents(path: Path, split: str, counts: list[int]) -> PartitionedTexts:
    """The cleaned, deduplicated documents of ``split`` (``train`` or ``val``), read lazily in canonical order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    folder = path / split / "documents"
    documents = DocumentSet(folder, len(counts), True, int(sum(counts)), 0)
    return PartitionedTexts(documents, counts)

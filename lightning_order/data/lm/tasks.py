"""The per-partition work of the LM steps: plain, picklable functions of one work item each.

An engine (:mod:`lightning_order.data.engine.engines`) runs them in this process, in worker
processes, or on Ray; each reads what its item names from disk, writes its own files, and
returns small plain results that the step combines in item order. Nothing here depends on which
process runs it or on how many there are.

* :func:`clean_chunk` then :func:`merge_partition`: the first pass (clean, key, route to the
  partition of the key) and the canonical partitions (fragments joined, sorted by key);
* :func:`dedup_bands`, :func:`group_bucket`, :func:`confirm_pairs`: exact duplicates per
  partition, MinHash band keys routed to buckets, candidate pairs per bucket, each confirmed by
  its exact word n-gram Jaccard (see :mod:`.clusters`);
* :func:`split_partition`, :func:`encode_partition`, :func:`pack_partition`: the split by
  document hash, token ids, blocks (the tokenizer's sample: :mod:`.sampling`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from lightning_order.data.engine.keys import val_mask
from lightning_order.data.engine.partitions import (
    KEY_COLUMNS,
    DocumentSet,
    read_table,
    table_digest,
    write_table,
)
from lightning_order.data.engine.storage import save_array
from lightning_order.data.lm.block_shards import write_shard
from lightning_order.data.lm.mixture import SOURCE_COLUMN
from lightning_order.data.lm.sampling import SAMPLE_SEED
from lightning_order.errors import DataError

__all__ = [
    "SAMPLE_SEED",
    "CleanItem",
    "DedupItem",
    "EncodeItem",
    "FolderItem",
    "MergeItem",
    "PackItem",
    "PairsItem",
    "SplitItem",
    "clean_chunk",
    "confirm_pairs",
    "dedup_bands",
    "encode_partition",
    "group_bucket",
    "merge_partition",
    "pack_partition",
    "remove_folder",
    "split_by_source",
    "split_partition",
]

_SCHEMA = pa.schema(
    [
        ("text", pa.large_string()),
        ("key_hi", pa.uint64()),
        ("key_lo", pa.uint64()),
        ("text_hash", pa.uint64()),
    ]
)


def _keyed_table(texts: list[str]) -> pa.Table:
    from lightning_order.data.lm.documents import document_keys

    hi, lo, own = document_keys(texts)
    return pa.table([pa.array(texts, pa.large_string()), hi, lo, own], schema=_SCHEMA)


# -- the work items: what the driver sends, small and picklable (paths and counts, never rows) -----------
@dataclass(frozen=True)
class CleanItem:
    """The work of :func:`clean_chunk`.

    Attributes:
        source: ``(reader, file)``: one :class:`~.documents.ChunkSource` and its index in corpus
            order, or a :class:`DocumentSet` and which of its files (never the whole chunk list, so
            an item's size does not grow with the corpus).
        out: the folder of fragments.
        partitions: the canonical partitions the rows are routed to.
        clean: clean the rows (``False``: only key them).
        eos_token: the end-of-text token cleaning removes.
        hook: a user's picklable ``clean(text) -> text``, or ``None``.
    """

    source: tuple[Any, int]
    out: Path
    partitions: int
    clean: bool
    eos_token: str
    hook: Callable[[str], str] | None = None


@dataclass(frozen=True)
class MergeItem:
    """The work of :func:`merge_partition`: partition ``partition``'s fragments (the files of the folder
    ``fragments``, read in name order: the item never lists them, so its size does not grow with the
    chunk count), joined into the set's folder ``out``."""

    partition: int
    fragments: Path
    out: Path


@dataclass(frozen=True)
class FolderItem:
    """One folder: of a partition's intermediate files (:func:`remove_folder`), or a band bucket's (:func:`group_bucket`)."""

    folder: Path


@dataclass(frozen=True)
class DedupItem:
    """The work of :func:`dedup_bands`.

    Attributes:
        documents: the partitioned documents.
        partition: which partition.
        part: the part's index (for doc ids).
        masks: the folder for the exact-duplicate mask.
        bands: the bucket folder.
        buckets: how many band buckets.
        threshold, ngram, num_perm, seed: the MinHash parameters.
    """

    documents: DocumentSet
    partition: int
    part: int
    masks: Path
    bands: Path
    buckets: int
    threshold: float
    ngram: int
    num_perm: int
    seed: int


@dataclass(frozen=True)
class PairsItem:
    """The work of :func:`confirm_pairs`: ``pairs`` (``(n, 2)`` doc ids), ``parts`` (part index ->
    DocumentSet, as before deduplication), ``threshold`` and ``ngram``."""

    pairs: np.ndarray
    parts: Mapping[int, DocumentSet]
    threshold: float
    ngram: int


@dataclass(frozen=True)
class SplitItem:
    """The work of :func:`split_partition`.

    Attributes:
        documents: the partitioned documents.
        partition: which partition.
        val_fraction, seed: the split's.
        out: part name -> folder.
        sources: a mixture's source count (1: one source).
        partitions: with several sources, the partition count (files are ``s·P + p``).
    """

    documents: DocumentSet
    partition: int
    val_fraction: float
    seed: int
    out: Mapping[str, Path]
    sources: int = 1
    partitions: int | None = None


@dataclass(frozen=True)
class EncodeItem:
    """The work of :func:`encode_partition`.

    Attributes:
        documents: the split's documents.
        file: which of its files.
        tokenizer: a ``tokenizer.json`` path.
        eos_id: the end-of-text id (``None``: none, a wrong order).
        bos_id: the BOS id (``None``: no BOS).
        vocab_size: the tokenizer's size (ids are checked against it).
        out: the ``.npy`` path to write.
        part: the split's name.
        measure_loss: count the characters the tokenizer loses (a supplied one).
    """

    documents: DocumentSet
    file: int
    tokenizer: str
    eos_id: int | None
    bos_id: int | None
    vocab_size: int
    out: str
    part: str
    measure_loss: bool = False


# -- the first pass: clean and partition ------------------------------------------------------------
def clean_chunk(item: CleanItem) -> dict[str, Any]:
    """Cleans one chunk (or only keys it: ``clean=False``) and writes its rows to per-partition fragments.

    Returns:
        ``rows_in``, ``rows``, ``dropped_empty``, ``dropped_null``, ``bom_stripped``,
        ``text_bytes`` and ``fragments`` (how many it wrote, each ``out/p<partition>/f<index>.arrow``:
        a chunk is cleaned :data:`~.documents.CHUNK_ROWS` rows at a time, appended in corpus order).
    """
    from lightning_order.data.lm.documents import CHUNK_ROWS, ChunkSource

    reader, index = item.source
    chunk = reader if isinstance(reader, ChunkSource) else None
    totals = dict.fromkeys(
        ("rows_in", "rows", "dropped_null", "dropped_empty", "bom_stripped", "text_bytes"), 0
    )
    if chunk is None:
        batches: Any = [reader.texts(index, keep_nulls=True)]
    else:  # a chunk as large as a file range is read CHUNK_ROWS rows at a time: memory stays bounded
        batches = (
            replace(chunk, start=a, stop=min(a + CHUNK_ROWS, chunk.stop)).texts(True)
            for a in range(chunk.start, chunk.stop, CHUNK_ROWS)
        )
    origin = chunk.origin if chunk is not None else None
    fragments = _Fragments(Path(item.out), f"f{index:06d}")
    try:
        for texts in batches:
            for key, value in _clean_batch(item, texts, fragments, origin).items():
                totals[key] += value
    except BaseException:
        fragments.close(keep=False)  # a failed item leaves no partial fragment in place
        raise
    fragments.close()
    return {**totals, "fragments": fragments.count}


class _Fragments:
    """One clean item's fragment files, one per partition it reaches, written a batch at a time.

    One file per item and partition, not per batch: the files the driver removes after the merge
    grow with the work items, not with the corpus. Each is renamed into place when complete.
    """

    def __init__(self, out: Path, name: str) -> None:
        self.out, self.name = out, name
        self.files: dict[int, tuple[Any, Any, Path, Path]] = {}
        self.count = 0

    def write(self, p: int, table: pa.Table) -> None:
        if p not in self.files:
            final = self.out / f"p{p:05d}" / f"{self.name}.arrow"
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.with_name(f".{final.name}.tmp")  # not *.arrow: merge_partition never reads it
            sink = pa.OSFile(str(tmp), "wb")
            self.files[p] = (sink, pa.ipc.new_file(sink, table.schema), tmp, final)
        self.files[p][1].write_table(table, max_chunksize=1 << 16)

    def close(self, keep: bool = True) -> None:
        files, self.files = self.files, {}
        for sink, writer, tmp, final in files.values():
            try:
                writer.close()
            finally:
                sink.close()
            if keep:
                os.replace(tmp, final)
            else:
                tmp.unlink(missing_ok=True)
        self.count += len(files) if keep else 0


def _clean_batch(
    item: CleanItem, texts: list[Any], fragments: _Fragments, origin: int | None
) -> dict[str, int]:
    """One batch of :func:`clean_chunk`: cleaned, keyed, its rows appended to the fragment of their partition."""
    from lightning_order.data.lm.documents import clean_document

    rows_in = len(texts)
    texts = [t for t in texts if t is not None]
    nulls = rows_in - len(texts)
    boms = _strip_byte_order_marks(texts)
    if item.clean:
        hook, eos = item.hook, item.eos_token
        for i, text in enumerate(texts):  # in place: one document's text is held once, raw or cleaned
            texts[i] = hook(text) if hook else clean_document(text, eos)
        _check_texts(texts, fragments.name)
    kept = [t for t in texts if t.strip()]
    dropped_empty = len(texts) - len(kept)
    del texts
    table = _keyed_table(kept)
    del kept
    if origin is not None:  # a mixture: each document keeps its source's index
        table = table.append_column(SOURCE_COLUMN, pa.array(np.full(table.num_rows, origin, np.int32)))
    count = int(item.partitions)
    partition = (table.column("key_lo").to_numpy() % np.uint64(count)).astype(np.int64)
    for p in np.unique(partition).tolist():
        fragments.write(p, table.filter(pa.array(partition == p)))
    return {
        "rows_in": rows_in,
        "rows": table.num_rows,
        "dropped_null": nulls,
        "dropped_empty": dropped_empty,
        "bom_stripped": boms,
        "text_bytes": int(pc.sum(pc.binary_length(table.column("text"))).as_py() or 0),
    }


def _strip_byte_order_marks(texts: list[str]) -> int:
    """Drops the U+FEFF a UTF-8 file with a byte order mark leaves at the start of its first document; how many had one.

    ``datasets`` reads text files as plain UTF-8, so the mark became the first character of a
    document (and a token of it). It is an encoding artefact, never content: removed in place,
    before any cleaning (a user's own ``clean`` never sees it), and counted.
    """
    found = 0
    for i, text in enumerate(texts):
        if text.startswith("\ufeff"):
            texts[i] = text.lstrip("\ufeff")
            found += 1
    return found


def _check_texts(texts: list[Any], where: str) -> None:
    """A cleaned document must be text (a user's own ``clean`` may return something else)."""
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise DataError(
            f"clean returned {type(texts[bad]).__name__}, not text, for document {bad} of input chunk "
            f"{where[1:]}: a clean override must return a str",
            step="clean",
        )


def merge_partition(item: MergeItem) -> dict[str, Any]:
    """Joins partition ``p``'s fragments, sorts them by key (the canonical order), writes ``part-p``."""
    folder = Path(item.fragments)
    paths = sorted(folder.glob("*.arrow")) if folder.is_dir() else []
    tables = [read_table(Path(p)) for p in paths]
    table = pa.concat_tables(tables) if tables else _SCHEMA.empty_table()
    table = table.sort_by([(name, "ascending") for name in KEY_COLUMNS]).combine_chunks()
    out = Path(item.out) / f"part-{int(item.partition):05d}.arrow"
    write_table(table, out)  # the fragments stay until every partition is merged: a retry finds them
    return {
        "rows": table.num_rows,
        "text_bytes": _text_bytes(table),
        "digest": table_digest(table),
    }


def remove_folder(item: FolderItem) -> None:
    """Removes one partition's folder of intermediate files, on a worker.

    Freeing a file's blocks is kernel work in proportion to its size: done where the work runs,
    not on the driver, whose share stays one item per partition.
    """
    shutil.rmtree(item.folder, ignore_errors=True)


def _text_bytes(table: pa.Table) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.binary_length(table.column("text"))).as_py() or 0) if table.num_rows else 0


# -- deduplication ---------------------------------------------------------------------------------
def dedup_bands(item: DedupItem) -> dict[str, Any]:
    """Exact duplicates of one partition (a mask), then MinHash band keys of its kept rows, routed to buckets."""
    from lightning_order.data.lm.clusters import band_keys, doc_ids

    documents: DocumentSet = item.documents
    p = int(item.partition)
    table = documents.read(p, ["text", "key_hi", "key_lo"])
    hi, lo = table.column("key_hi").to_numpy(), table.column("key_lo").to_numpy()
    keep = np.ones(table.num_rows, dtype=bool)
    if table.num_rows > 1:
        keep[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])  # sorted by key: a duplicate follows its first
    mask_path = Path(item.masks) / f"exact-{item.part}-{p:05d}.npy"
    mask_path.parent.mkdir(parents=True, exist_ok=True)
    save_array(mask_path, keep)
    rows = np.flatnonzero(keep)
    texts = table.column("text") if len(rows) == table.num_rows else table.column("text").take(pa.array(rows))
    keys, docs, short = band_keys(texts, item.threshold, item.ngram, item.num_perm, item.seed)
    docs = doc_ids(int(item.part), p, rows[docs])
    buckets = int(item.buckets)
    route = (keys % np.uint64(buckets)).astype(np.int64)
    for bucket in np.unique(route).tolist():
        chosen = route == bucket
        path = Path(item.bands) / f"b{bucket:05d}" / f"{item.part}-{p:05d}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_array(path, np.stack([keys[chosen], docs[chosen].view(np.uint64)], axis=1))
    return {"mask": str(mask_path), "exact_removed": int((~keep).sum()), "short": short}


def group_bucket(item: FolderItem) -> np.ndarray:
    """The candidate pairs of one bucket: documents sharing a band key (``(n, 2)`` int64, unique, ``a < b``)."""
    from lightning_order.data.lm.clusters import pairs_of_groups

    folder = Path(item.folder)
    arrays = [np.load(path) for path in sorted(folder.glob("*.npy"))] if folder.exists() else []
    if not arrays:
        return np.empty((0, 2), dtype=np.int64)
    both = np.concatenate(arrays)
    return pairs_of_groups(both[:, 0], both[:, 1].view(np.int64))


def confirm_pairs(item: PairsItem) -> dict[str, Any]:
    """Each candidate pair's exact word n-gram Jaccard, read from the partitions; which reach the threshold.

    The documents are read one partition at a time (only their rows, copied out of the memory map,
    which is released before the next partition), each shingled as it is read.

    Returns:
        ``confirmed`` (bool per pair) and ``keys`` (per pair and side, the document's 128-bit key
        as ``(hi, lo)``: the cluster keeps its smallest).
    """
    from lightning_order.data.lm.clusters import split_doc_ids
    from lightning_order.data.lm.shingles import shingle_set

    pairs = np.asarray(item.pairs, dtype=np.int64).reshape(-1, 2)
    parts: dict[int, DocumentSet] = item.parts
    docs = np.unique(pairs)  # sorted: the documents of one partition are neighbours
    part, partition, rows = split_doc_ids(docs)
    shingles: list[np.ndarray] = []
    doc_keys = np.zeros((len(docs), 2), dtype=np.uint64)
    starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (partition[1:] != partition[:-1])])
    for start, stop in zip(starts.tolist(), [*starts[1:].tolist(), len(docs)]):
        path = parts[int(part[start])].path(int(partition[start]))
        table = read_table(path, ["text", "key_hi", "key_lo"]).take(pa.array(rows[start:stop]))
        doc_keys[start:stop, 0] = table.column("key_hi").to_numpy()
        doc_keys[start:stop, 1] = table.column("key_lo").to_numpy()
        shingles.extend(shingle_set(text, item.ngram) for text in table.column("text").to_pylist())
        del table
    index = np.searchsorted(docs, pairs)
    confirmed = np.zeros(len(pairs), dtype=bool)
    for i, (a, b) in enumerate(index.tolist()):
        sa, sb = shingles[a], shingles[b]
        inter = len(np.intersect1d(sa, sb, assume_unique=True))
        union = len(sa) + len(sb) - inter
        confirmed[i] = union > 0 and inter / union >= item.threshold
    return {"confirmed": confirmed, "keys": doc_keys[index]}


# -- split, sample, encode, pack ---------------------------------------------------------------------
def split_partition(item: SplitItem) -> dict[str, Any]:
    """Partition ``p``'s kept rows to train or validation by the seeded hash of their split key.

    Each part's file keeps the canonical order and gains ``doc_hash`` (the unseeded key hash). In a
    mixture of ``S`` sources over ``P`` partitions, source ``s``'s rows of partition ``p`` go to
    file ``s·P + p`` (each source's files together, so ``pack`` never joins two sources in a block).
    """
    from lightning_order.data.engine.keys import text_key_hashes

    documents: DocumentSet = item.documents
    p = int(item.partition)
    table = documents.read(p)
    seeded, unseeded = text_key_hashes(table.column("text"), (int(item.seed), None))
    flags = val_mask(seeded, float(item.val_fraction))
    table = table.append_column("doc_hash", pa.array(unseeded.view(np.int64)))
    sources = int(item.sources or 1)
    if sources > 1:
        return split_by_source(table, flags, p, int(item.partitions), sources, item.out)
    out = {}
    for name, chosen in (("train", ~flags), ("val", flags)):
        part = table.filter(pa.array(chosen))
        write_table(part, Path(item.out[name]) / f"part-{p:05d}.arrow")
        out[name] = {"rows": part.num_rows, "text_bytes": _text_bytes(part), "digest": table_digest(part)}
    return out


def split_by_source(
    table: pa.Table, flags: np.ndarray, p: int, partitions: int, sources: int, folders: dict[str, str]
) -> dict[str, Any]:
    """A mixture's partition ``p`` split: each side's rows of source ``s`` written to file ``s·P + p``."""
    origin = table.column(SOURCE_COLUMN).to_numpy() if table.num_rows else np.empty(0, np.int32)
    out: dict[str, Any] = {}
    for name, chosen in (("train", ~flags), ("val", flags)):
        files = []
        for s in range(sources):
            part = table.filter(pa.array(chosen & (origin == s)))
            write_table(part, Path(folders[name]) / f"part-{s * partitions + p:05d}.arrow")
            files.append(
                {"rows": part.num_rows, "text_bytes": _text_bytes(part), "digest": table_digest(part)}
            )
        out[name] = {
            "rows": sum(f["rows"] for f in files),
            "text_bytes": sum(f["text_bytes"] for f in files),
            "digest": [f["digest"] for f in files],
            "source_rows": [f["rows"] for f in files],
        }
    return out


def encode_partition(item: EncodeItem) -> dict[str, Any]:
    """Token ids of one file's documents, one end-of-text id after each, written as an int32 ``.npy``."""
    from tokenizers import Tokenizer

    from lightning_order.data.lm.blocks import encode_documents

    documents: DocumentSet = item.documents
    texts = documents.text_column(int(item.file))
    tokenizer = Tokenizer.from_file(item.tokenizer)
    where = f"{item.part} split, file {int(item.file)}"
    stream = encode_documents(
        tokenizer,
        texts,
        item.eos_id,
        where=where,
        bos_id=item.bos_id,
        vocab_size=item.vocab_size,
        measure_loss=bool(item.measure_loss),
    )
    out = Path(item.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_array(out, stream.ids)
    eos = int((stream.ids == item.eos_id).sum()) if item.eos_id is not None else 0
    return {
        "tokens": len(stream.ids),
        "documents": len(texts),
        "eos_tokens": eos,
        "digest": xxhash.xxh3_128_hexdigest(stream.ids),
        "lost_characters": stream.lost_characters,
        "characters": stream.characters,
        "empty_documents": stream.empty_documents,
    }


@dataclass(frozen=True)
class PackItem:
    """The work of :func:`pack_partition`: one file of token ids cut into blocks.

    Attributes:
        tokens: the ``.npy`` of the file's token ids.
        blocks: the shard to write (nothing is written when the file holds no whole block).
        block_size: the config's: blocks of ``block_size + 1`` tokens are cut.
        eos_id: the end-of-text id (``None``: none counted).
    """

    tokens: str
    blocks: str
    block_size: int
    eos_id: int | None


def pack_partition(item: PackItem) -> dict[str, Any]:
    """Writes one file's whole blocks (``block_size + 1`` tokens each) into a shard file of its own; returns its tail tokens.

    Returns:
        ``tail`` (the tokens after its last whole block, int32), ``lead`` (how many of them finish
        a document its last block began: up to the first end-of-text id; 0 when the tail starts a
        document, or holds no end-of-text), ``eos`` (the end-of-text ids in the blocks it wrote:
        counted here, so no process reads the blocks again) and ``rows``.
    """
    ids = np.load(item.tokens, mmap_mode="r")
    eos_id = item.eos_id
    count = len(ids) // (item.block_size + 1)
    end = count * (item.block_size + 1)  # where the whole blocks end
    eos = 0
    if count:
        whole = np.asarray(ids[:end])
        if eos_id is not None:
            eos = int(np.count_nonzero(whole == eos_id))
        write_shard(item.blocks, whole.reshape(count, -1))  # a file of its own, renamed into place
        del whole
    tail = np.array(ids[end:], dtype=np.int32)
    lead = 0
    if count and eos_id is not None and len(tail) and int(ids[end - 1]) != eos_id:
        ends = np.flatnonzero(tail == eos_id)
        lead = int(ends[0]) + 1 if len(ends) else 0  # none: a stream without end-of-text (eos=False)
    return {"tail": tail, "lead": lead, "eos": eos, "rows": count}

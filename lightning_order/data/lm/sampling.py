"""The tokenizer's sample chosen on the workers: a bottom-k by hash per file, merged, then read back.

The rule (``build_vocab``'s, unchanged): every train document gets a seeded hash of its text;
documents are taken in hash order until ``tokenizer_train_bytes`` would be passed (at least
one), and fed to the trainer file by file, in file order. Computed so that the driver never
holds a hash or size per train document, nor reads a train file:

1. per file (:func:`local_sample`, a worker): the file's own prefix in hash order up to the cap,
   and the first document past it (hash, size, row), written to a scratch ``.npy``. A document
   of the global prefix, or the one that ends it, is in its file's prefix (the documents before
   it in its file are a subset of those before it overall), so the union of the files' prefixes
   decides the whole sample;
2. on the driver (:func:`merged_threshold`): those prefixes merged file by file, the running
   merge cut at the cap each time (a document cut can never come back), so it holds at most a
   cap's worth of documents plus one file's prefix: bounded by ``tokenizer_train_bytes``, never
   by the corpus; the threshold is the last hash taken;
3. per file with a document at or below the threshold (:func:`sample_texts`, a worker): the
   chosen rows' texts in file order, written to scratch; the driver streams these into the
   trainer.

The sample, its order and so the trained tokenizer are those of the rule, whichever engine and
however many processes ran the tasks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from lightning_order.data.engine.partitions import DocumentSet, read_table, write_table
from lightning_order.data.engine.storage import save_array

__all__ = [
    "SAMPLE_SEED",
    "local_sample",
    "merged_threshold",
    "sample_digest",
    "sample_texts",
    "sampled_texts",
    "take_prefix",
]

#: The seed of the hash that orders documents for the tokenizer's sample (fixed: part of the rule).
SAMPLE_SEED = 0x5A17


def take_prefix(hashes: np.ndarray, sizes: np.ndarray, cap: int, stop: bool = False) -> np.ndarray:
    """The indices, in hash order, of the documents taken until ``cap`` bytes would be passed (at least one).

    With ``stop``, also the first document not taken (the one that would pass the cap): a part's
    prefix must carry it, since it ends the sample for every document after it wherever they
    come from (without it, a later part's smaller documents would fill its place).
    """
    if not len(hashes):
        return np.empty(0, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    total = np.cumsum(np.asarray(sizes, dtype=np.int64)[order])
    taken = max(1, int(np.searchsorted(total, cap, side="right")))
    return order[: taken + 1] if stop else order[:taken]


def local_sample(item: dict[str, Any]) -> dict[str, Any]:
    """One file's prefix in hash order up to the cap, as ``(hash, size, row)`` uint64 rows in a scratch ``.npy``.

    Item keys: ``documents`` (a DocumentSet), ``file``, ``cap`` (bytes), ``out`` (the ``.npy``).

    Returns:
        ``rows`` (the file's documents), ``taken`` (its prefix's length) and ``least`` (its
        smallest hash, ``None`` for an empty file).
    """
    documents: DocumentSet = item["documents"]
    texts = documents.texts(int(item["file"]))
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(b, seed=SAMPLE_SEED) for b in encoded), dtype=np.uint64, count=len(encoded)
    )
    sizes = np.fromiter(map(len, encoded), dtype=np.uint64, count=len(encoded))
    del texts, encoded
    chosen = take_prefix(hashes, sizes, int(item["cap"]), stop=True)
    save_array(item["out"], np.stack([hashes[chosen], sizes[chosen], chosen.astype(np.uint64)], axis=1))
    return {
        "rows": len(hashes),
        "taken": len(chosen),
        "least": int(hashes.min()) if len(hashes) else None,
    }


def merged_threshold(paths: Sequence[str], cap: int) -> tuple[int, int, int]:
    """The rule's ``(threshold, documents, bytes)`` from the files' prefixes, merged one file at a time.

    Returns ``(-1, 0, 0)`` when every file is empty.
    """
    running = np.empty((0, 3), dtype=np.uint64)
    for path in paths:
        found = np.load(path)
        if not len(found):
            continue
        both = np.concatenate([running, found])
        running = both[take_prefix(both[:, 0], both[:, 1], cap, stop=True)]
    if not len(running):
        return -1, 0, 0
    taken = running[take_prefix(running[:, 0], running[:, 1], cap)]
    return int(taken[-1, 0]), len(taken), int(taken[:, 1].sum())


def sample_texts(item: dict[str, Any]) -> np.ndarray:
    """Writes one file's sampled texts (hash at or below ``threshold``) in file order; returns their sorted hashes.

    Item keys: ``documents`` (a DocumentSet, or the input's chunks), ``file``, ``prefix`` (its :func:`local_sample` ``.npy``),
    ``threshold``, ``out`` (the Arrow file to write).
    """
    prefix = np.load(item["prefix"])
    chosen = prefix[prefix[:, 0] <= np.uint64(int(item["threshold"]))]
    rows = np.sort(chosen[:, 2]).astype(np.int64)
    documents = item["documents"]
    if isinstance(documents, DocumentSet):  # memory-mapped: only the chosen rows are copied
        texts = documents.read(int(item["file"]), ["text"]).column("text").take(pa.array(rows))
    else:  # the input's chunks (a wrong order: build_vocab before clean)
        found = documents.texts(int(item["file"]))
        texts = pa.array([found[i] for i in rows.tolist()], pa.large_string())
    write_table(pa.table({"text": texts}), Path(item["out"]))
    return np.sort(chosen[:, 0])


def sampled_texts(paths: Sequence[str]) -> Iterator[str]:
    """The sample's texts, file by file in file order (each file memory-mapped, one text made at a time)."""
    for path in paths:
        column = read_table(Path(path), ["text"]).column("text")
        for chunk in column.chunks:
            for value in chunk:
                yield value.as_py()


def sample_digest(hashes: Sequence[np.ndarray]) -> str:
    """The sample's fingerprint: xxh3-128 of each file's sampled hashes, sorted, in file order."""
    digest = xxhash.xxh3_128()
    for found in hashes:
        digest.update(np.asarray(found, dtype=np.uint64).tobytes())
    return digest.hexdigest()

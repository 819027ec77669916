"""Dedup's grouping on the workers: candidate pairs confirmed, connected and turned into per-partition remove lists.

The rule is :mod:`.clusters`' (every pair of documents sharing a band key is a candidate, each
candidate confirmed by its exact n-gram Jaccard, confirmed pairs connected into clusters, each
cluster keeping its smallest key); what changes is where it runs. The driver holds only file
names and counts:

1. per band bucket (:func:`route_pairs`): its candidate pairs, each routed by a hash of the pair
   to a *pair bucket*, so a pair found in several band buckets meets itself in one place;
2. per pair bucket (:func:`confirm_bucket`): its distinct pairs confirmed (a chunk at a time),
   and the confirmed ones reduced to a *forest*: every document they touch with the smallest
   document id of its component there (:func:`connected_labels`) and its key;
3. in rounds (:func:`merge_forests`): forests merged :data:`FAN_IN` at a time until one is left
   (each round's work is spread over the workers; a forest holds only documents that have a
   confirmed near-duplicate);
4. once (:func:`write_removals`): each component keeps its smallest key; the others are written
   as one remove list per partition, with the step's fingerprint computed there;
5. per partition (:func:`apply_removals`): its remove list applied to its keep mask, its kept
   rows and bytes counted.

The same components, keepers and removed documents as a union-find over every confirmed pair
would give, whichever engine ran the tasks and in which order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from lightning_order.data.engine.partitions import DocumentSet
from lightning_order.data.engine.storage import save_array
from lightning_order.data.lm.clusters import split_doc_ids
from lightning_order.data.lm.shingles import mix_hashes

__all__ = [
    "FAN_IN",
    "apply_removals",
    "confirm_bucket",
    "connected_labels",
    "merge_forests",
    "removal_path",
    "route_pairs",
    "write_removals",
]

#: Forests merged by one task of a round (rounds: log base FAN_IN of the pair buckets).
FAN_IN = 8


def connected_labels(a: np.ndarray, b: np.ndarray, count: int) -> np.ndarray:
    """Each of ``count`` nodes' component label: the smallest node index of its component.

    Edges ``a[i]``–``b[i]`` (node indices). Vectorised label propagation with pointer jumping:
    every label only ever decreases to the label of a connected node, and the loop ends when
    both ends of every edge agree, so each component ends with its smallest index.
    """
    label = np.arange(count, dtype=np.int64)
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        for ends in (a, b, label[a], label[b]):  # the nodes and their current roots both hook lower
            np.minimum.at(new, ends, low)
        while True:  # pointer jumping: every node straight to its root's label
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label
        label = new


def _forest(nodes: np.ndarray, parents: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``(n, 4)`` uint64 rows ``(node, root, key_hi, key_lo)``: every node once, its component's smallest id as root."""
    unique, first = np.unique(nodes, return_index=True)
    labels = connected_labels(np.searchsorted(unique, nodes), np.searchsorted(unique, parents), len(unique))
    return np.stack(
        [unique.view(np.uint64), unique[labels].view(np.uint64), keys[first, 0], keys[first, 1]], axis=1
    )


def _save_forest(path: str | Path, forest: np.ndarray) -> str:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_array(path, forest)
    return str(path)


def route_pairs(item: dict[str, Any]) -> int:
    """One band bucket's candidate pairs, written to the pair buckets their hash picks; how many it wrote.

    Item keys: ``folder`` (the band bucket), ``out`` (the pairs folder), ``buckets`` (pair
    buckets), ``name`` (this band bucket's file name in each pair bucket).
    """
    from lightning_order.data.lm.tasks import group_bucket

    pairs = group_bucket({"folder": item["folder"]})
    if not len(pairs):
        return 0
    route = (mix_hashes(pairs.view(np.uint64)) % np.uint64(int(item["buckets"]))).astype(np.int64)
    for bucket in np.unique(route).tolist():
        path = Path(item["out"]) / f"q{bucket:05d}" / f"{item['name']}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_array(path, pairs[route == bucket])
    return len(pairs)


def confirm_bucket(item: dict[str, Any]) -> dict[str, Any]:
    """One pair bucket's distinct pairs confirmed; the confirmed ones written as a forest (and those across parts).

    Item keys: ``folder`` (the pair bucket), ``parts`` (part index -> DocumentSet),
    ``threshold``, ``ngram``, ``chunk`` (pairs confirmed at once: the n-grams held), ``forest``
    (the ``.npy`` to write), ``across`` (the ``.npy`` for confirmed pairs across parts: only a
    wrong order, dedup after the split, has any).

    Returns:
        ``candidates`` (its distinct pairs) and ``confirmed``.
    """
    from lightning_order.data.lm.tasks import confirm_pairs

    folder = Path(item["folder"])
    arrays = [np.load(path) for path in sorted(folder.glob("*.npy"))] if folder.is_dir() else []
    pairs = np.unique(np.concatenate(arrays), axis=0) if arrays else np.empty((0, 2), dtype=np.int64)
    found, keys = [], []
    for start in range(0, len(pairs), max(1, int(item["chunk"]))):
        chunk = pairs[start : start + int(item["chunk"])]
        result = confirm_pairs({**item, "pairs": chunk})
        found.append(chunk[result["confirmed"]])
        keys.append(result["keys"][result["confirmed"]])
    confirmed = np.concatenate(found) if found else np.empty((0, 2), dtype=np.int64)
    pair_keys = np.concatenate(keys) if keys else np.empty((0, 2, 2), dtype=np.uint64)
    same = split_doc_ids(confirmed[:, 0])[0] == split_doc_ids(confirmed[:, 1])[0]
    mine, mine_keys = confirmed[same], pair_keys[same]
    _save_forest(
        item["forest"],
        _forest(mine.ravel(), mine[:, ::-1].ravel(), mine_keys.reshape(-1, 2))
        if len(mine)
        else np.empty((0, 4), dtype=np.uint64),
    )
    _save_forest(item["across"], confirmed[~same])
    return {"candidates": len(pairs), "confirmed": len(confirmed)}


def merge_forests(item: dict[str, Any]) -> str:
    """Several forests merged into one (item keys ``forests``: paths, ``out``: the ``.npy``); its path."""
    forests = [np.load(path) for path in item["forests"]]
    both = np.concatenate([np.empty((0, 4), dtype=np.uint64), *forests])
    if not len(both):
        return _save_forest(item["out"], both)
    nodes, parents = both[:, 0].view(np.int64), both[:, 1].view(np.int64)
    return _save_forest(item["out"], _forest(nodes, parents, both[:, 2:]))


def write_removals(item: dict[str, Any]) -> dict[str, Any]:
    """The last forest's removed documents written per partition; the step's fingerprint and counts.

    Item keys: ``forest`` (the merged ``.npy``), ``across`` (the pair buckets' across-part
    ``.npy`` files), ``out`` (the folder of remove lists, ``<part>-<partition>.npy`` of rows),
    ``fingerprint`` (what the step's fingerprint hashes before the sorted removed ids).

    Returns:
        ``near_removed``, ``clusters``, ``straddling`` (confirmed pairs across parts with
        neither side removed) and ``fingerprint``.
    """
    from lightning_order.ledger import fingerprint

    forest = np.load(item["forest"])
    nodes, roots = forest[:, 0].view(np.int64), forest[:, 1].view(np.int64)
    # Within a component (same root), the smallest (key_hi, key_lo, id) is kept.
    order = np.lexsort((nodes, forest[:, 3], forest[:, 2], roots))
    first = np.r_[True, roots[order][1:] != roots[order][:-1]] if len(order) else np.zeros(0, bool)
    removed = np.sort(nodes[order][~first])
    part, partition, rows = split_doc_ids(removed)
    out = Path(item["out"])
    out.mkdir(parents=True, exist_ok=True)
    starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (partition[1:] != partition[:-1])])
    for start, stop in zip(starts.tolist(), [*starts[1:].tolist(), len(removed)]):
        if start < len(removed):
            save_array(removal_path(out, int(part[start]), int(partition[start])), rows[start:stop])
    across = [np.load(path) for path in item["across"] if Path(path).exists()]
    pairs = np.concatenate([np.empty((0, 2), dtype=np.int64), *across])
    straddling = int((~np.isin(pairs, removed).any(axis=1)).sum()) if len(pairs) else 0
    return {
        "near_removed": len(removed),
        "clusters": int(first.sum()),
        "straddling": straddling,
        "fingerprint": fingerprint(*item["fingerprint"], removed.tolist()),
    }


def apply_removals(item: dict[str, Any]) -> dict[str, Any]:
    """One partition's remove list applied to its keep mask; its kept rows and text bytes.

    Item keys: ``documents`` (the DocumentSet, before deduplication), ``partition``, ``mask``
    (its exact-duplicate keep mask, rewritten), ``removed`` (its remove list ``.npy``, which
    may not exist: nothing removed).
    """
    from lightning_order.data.engine.partitions import read_table

    keep = np.load(item["mask"])
    removed = Path(item["removed"])
    if removed.exists():
        keep[np.load(removed)] = False
        save_array(item["mask"], keep)
    documents: DocumentSet = item["documents"]
    path = documents.path(int(item["partition"]))
    size = 0
    if path.exists():
        lengths = pc.binary_length(read_table(path, ["text"]).column("text")).to_numpy(zero_copy_only=False)
        size = int(lengths[keep].sum())
    return {"rows": int(keep.sum()), "text_bytes": size}


def removal_path(folder: Path, part: int, partition: int) -> Path:
    """Where :func:`write_removals` puts the remove list of ``partition`` of ``part``."""
    return folder / f"{int(part)}-{int(partition):05d}.npy"

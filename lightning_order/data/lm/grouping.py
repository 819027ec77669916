"""Dedup's grouping on the workers: candidate pairs confirmed, connected and turned into per-partition remove lists.

The rule is :mod:`.clusters`' (every pair of documents sharing a band key is a candidate, each
candidate confirmed by its exact n-gram Jaccard, confirmed pairs connected into clusters, each
cluster keeping its smallest key); what changes is where it runs. The driver holds only file
names and counts, and no task holds more than its share (``K`` shards of the documents, by a hash
of their id: :func:`~.components.shard_of`):

1. per band bucket (:func:`route_pairs`): its candidate pairs, each routed by a hash of the pair
   to a *pair bucket*, so a pair found in several band buckets meets itself in one place;
2. per pair bucket (:func:`confirm_bucket`): its distinct pairs confirmed (a chunk at a time),
   and the confirmed ones reduced to a *forest* (every document they touch under the smallest
   document id of its component there: :func:`connected_labels`), whose rows and keys it routes
   to their document's shard;
3. in rounds, per shard (:func:`~.components.connect`): the forests' rows connected until every
   document is labelled by its component's smallest id;
4. per document shard (:func:`settle_shard`): each document's key joined to its row; within each
   component, all but the shard's smallest ``(key, id)`` are removed there, the smallest sent to
   its component's shard as a *candidate*;
5. per component shard (:func:`keep_smallest`): each component keeps its smallest candidate (the
   smallest ``(key, id)`` of the component) and removes the others. Steps 4 and 5 write their
   removed documents as one list per ``(shard, part, partition)`` and return a multiset hash of
   them (:func:`removed_digest`: summed by the driver, the same whatever ``K`` and the workers);
6. per partition (:func:`apply_removals`): every remove list of it applied to its keep mask, its
   kept rows and bytes counted.

With more than one part (dedup after the split: a wrong order), the confirmed pairs across parts
with neither side removed are counted per shard, one side at a time (:func:`straddle`).

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
from lightning_order.data.lm.components import connect, read_rows, shard_of, write_routed
from lightning_order.data.lm.shingles import mix_hashes
from lightning_order.errors import DataError

__all__ = [
    "apply_removals",
    "confirm_bucket",
    "connected_labels",
    "count_straddling",
    "keep_smallest",
    "removal_path",
    "removal_paths",
    "remove_components",
    "removed_digest",
    "route_pairs",
    "settle_shard",
    "straddle",
]


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


def route_pairs(item: dict[str, Any]) -> int:
    """One band bucket's candidate pairs, written to the pair buckets their hash picks; how many it wrote.

    Item keys: ``folder`` (the band bucket), ``out`` (the pairs folder), ``buckets`` (pair
    buckets), ``name`` (this band bucket's file name in each pair bucket).
    """
    from lightning_order.data.lm.tasks import FolderItem, group_bucket

    pairs = group_bucket(FolderItem(Path(item["folder"])))
    if not len(pairs):
        return 0
    route = (mix_hashes(pairs.view(np.uint64)) % np.uint64(int(item["buckets"]))).astype(np.int64)
    for bucket in np.unique(route).tolist():
        path = Path(item["out"]) / f"q{bucket:05d}" / f"{item['name']}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_array(path, pairs[route == bucket])
    return len(pairs)


def confirm_bucket(item: dict[str, Any]) -> dict[str, Any]:
    """One pair bucket's distinct pairs confirmed; the confirmed ones' forest (and those across parts) routed to the shards.

    Item keys: ``folder`` (the pair bucket), ``parts`` (part index -> DocumentSet),
    ``threshold``, ``ngram``, ``chunk`` (pairs confirmed at once: the n-grams held), ``rows``
    (the folder of round 0's ``(node, root)`` rows), ``keys`` (the folder of the
    ``(node, key_hi, key_lo)`` rows), ``across`` (the folder of confirmed pairs across parts:
    only a wrong order, dedup after the split, has any), ``shards``, ``name`` (this bucket's file
    name in each shard's folder).

    Returns:
        ``candidates`` (its distinct pairs), ``confirmed`` and ``across`` (those across parts).
    """
    from lightning_order.data.lm.tasks import PairsItem, confirm_pairs

    folder = Path(item["folder"])
    arrays = [np.load(path) for path in sorted(folder.glob("*.npy"))] if folder.is_dir() else []
    pairs = np.unique(np.concatenate(arrays), axis=0) if arrays else np.empty((0, 2), dtype=np.int64)
    found, keys = [], []
    for start in range(0, len(pairs), max(1, int(item["chunk"]))):
        chunk = pairs[start : start + int(item["chunk"])]
        result = confirm_pairs(PairsItem(chunk, item["parts"], item["threshold"], item["ngram"]))
        found.append(chunk[result["confirmed"]])
        keys.append(result["keys"][result["confirmed"]])
    confirmed = np.concatenate(found) if found else np.empty((0, 2), dtype=np.int64)
    pair_keys = np.concatenate(keys) if keys else np.empty((0, 2, 2), dtype=np.uint64)
    same = split_doc_ids(confirmed[:, 0])[0] == split_doc_ids(confirmed[:, 1])[0]
    mine, mine_keys = confirmed[same], pair_keys[same]
    shards, name = int(item["shards"]), str(item["name"])
    if len(mine):
        forest = _forest(mine.ravel(), mine[:, ::-1].ravel(), mine_keys.reshape(-1, 2))
        route = shard_of(forest[:, 0].view(np.int64), shards)
        write_routed(item["rows"], np.ascontiguousarray(forest[:, :2]).view(np.int64), route, name)
        write_routed(item["keys"], np.ascontiguousarray(forest[:, [0, 2, 3]]), route, name)
    across = confirmed[~same]
    write_routed(item["across"], across, shard_of(across[:, 0], shards), name)
    return {"candidates": len(pairs), "confirmed": len(confirmed), "across": len(across)}


def removed_digest(removed: np.ndarray) -> dict[str, int]:
    """A multiset hash of removed document ids: ``count`` and two 64-bit sums of mixes of each id.

    Sums commute, so the driver adds the shards' digests (mod 2**64) into the same value whatever
    the shards and the order: the step's fingerprint, without every id in one place.
    """
    ids = np.asarray(removed, dtype=np.int64).reshape(-1, 1).view(np.uint64)
    with np.errstate(over="ignore"):
        first, second = (int(mix_hashes(ids, salt=salt).sum(dtype=np.uint64)) for salt in (1, 2))
    return {"count": len(ids), "sum_1": first, "sum_2": second}


def _write_removals(folder: Path, removed: np.ndarray, shard: str) -> None:
    """``removed`` document ids written as one list of rows per partition: ``folder/<part>-<partition>/<shard>.npy``."""
    removed = np.sort(removed)
    part, partition, rows = split_doc_ids(removed)
    starts = np.flatnonzero(np.r_[True, (part[1:] != part[:-1]) | (partition[1:] != partition[:-1])])
    for start, stop in zip(starts.tolist(), [*starts[1:].tolist(), len(removed)]):
        if start < len(removed):
            path = removal_path(folder, int(part[start]), int(partition[start]), shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            save_array(path, rows[start:stop])


def _firsts(order: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Whether each position of ``order`` starts a new value of ``groups[order]``."""
    grouped = groups[order]
    return np.r_[True, grouped[1:] != grouped[:-1]] if len(order) else np.zeros(0, dtype=bool)


def settle_shard(item: dict[str, Any]) -> dict[str, int]:
    """One document shard's settled rows joined to their keys; all but each component's local smallest removed.

    Item keys: ``rows`` (this shard's settled ``(node, root)`` files), ``keys`` (its
    ``(node, key_hi, key_lo)`` files, from :func:`confirm_bucket`), ``removed`` (the folder of remove
    lists: :func:`removal_path`), ``candidates`` (where each component's smallest here is routed, by
    its root's shard), ``shards``, ``name``.

    Returns:
        :func:`removed_digest` of what it removed, and ``held`` (bytes of the arrays it held).
    """
    rows = np.unique(read_rows(item["rows"], 2), axis=0)
    keys = read_rows(item["keys"], 3, np.uint64)
    known, first_key = np.unique(keys[:, 0].view(np.int64), return_index=True)
    at = np.searchsorted(known, rows[:, 0])
    if len(rows) and (at.max() >= len(known) or not np.array_equal(known[at], rows[:, 0])):
        raise DataError(
            f"a document without its key in {item['keys']}: the dedup scratch files are incomplete "
            "(a worker died mid-write?); delete the cache folder and prepare again",
            step="dedup",
        )
    nodes, roots = rows[:, 0], rows[:, 1]
    key_hi, key_lo = keys[first_key[at], 1], keys[first_key[at], 2]
    # Within a component (same root), the smallest (key_hi, key_lo, id) is kept: here, the local one.
    order = np.lexsort((nodes, key_lo, key_hi, roots))
    first = _firsts(order, roots)
    best = order[first]
    candidates = np.stack(
        [roots[best].view(np.uint64), key_hi[best], key_lo[best], nodes[best].view(np.uint64)], 1
    )
    write_routed(
        item["candidates"], candidates, shard_of(roots[best], int(item["shards"])), str(item["name"])
    )
    removed = nodes[order[~first]]
    _write_removals(item["removed"], removed, f"n{item['name']}")
    return {**removed_digest(removed), "held": int(rows.nbytes + keys.nbytes + candidates.nbytes)}


def keep_smallest(item: dict[str, Any]) -> dict[str, int]:
    """One component shard's candidates: each component keeps its smallest ``(key, id)``, the others removed.

    Item keys: ``candidates`` (this shard's ``(root, key_hi, key_lo, node)`` files), ``removed``
    (the folder of remove lists), ``keepers`` (where the kept documents are routed, by their
    shard: :func:`straddle` reads them), ``shards``, ``name``.

    Returns:
        :func:`removed_digest` of what it removed, ``clusters`` (its components) and ``held``.
    """
    found = np.unique(read_rows(item["candidates"], 4, np.uint64), axis=0)
    roots, nodes = found[:, 0].view(np.int64), found[:, 3].view(np.int64)
    order = np.lexsort((nodes, found[:, 2], found[:, 1], roots))
    first = _firsts(order, roots)
    kept = nodes[order[first]].reshape(-1, 1)
    write_routed(item["keepers"], kept, shard_of(kept[:, 0], int(item["shards"])), str(item["name"]))
    removed = nodes[order[~first]]
    _write_removals(item["removed"], removed, f"r{item['name']}")
    return {**removed_digest(removed), "clusters": int(first.sum()), "held": int(found.nbytes)}


def straddle(item: dict[str, Any]) -> dict[str, int]:
    """One document shard's across-part pairs whose side ``column`` (a document of this shard) is not removed.

    Item keys: ``pairs`` (this shard's pair files), ``column`` (0 or 1), ``rows`` (its settled
    rows: the documents in a component), ``keepers`` (its kept documents), ``out`` (where the
    pairs left are routed by their other side's shard; ``None``: only counted), ``shards``, ``name``.

    Returns:
        ``left``: the pairs whose side ``column`` is kept or in no component.
    """
    pairs = read_rows(item["pairs"], 2)
    side = pairs[:, int(item["column"])]
    removed = np.isin(side, read_rows(item["rows"], 2)[:, 0]) & ~np.isin(side, read_rows(item["keepers"], 1))
    left = pairs[~removed]
    if item["out"] is not None:
        write_routed(item["out"], left, shard_of(left[:, 1], int(item["shards"])), str(item["name"]))
    return {"left": len(left)}


def remove_components(engine: Any, folder: Path, shards: int) -> dict[str, Any]:
    """Steps 3 to 5 on ``engine``'s workers: the confirmed forests connected, each component's keeper chosen, the rest removed.

    Args:
        engine: runs the tasks.
        folder: the scratch folder: round 0's rows in ``components/rows000/s<shard>/`` and the
            keys in ``keys/s<shard>/`` (:func:`confirm_bucket` writes both); the remove lists are
            written under ``removed/`` (:func:`removal_paths`), the keepers under ``keepers/``.
        shards: ``K`` (what the rows and keys were routed with).

    Returns:
        ``near_removed``, ``clusters``, ``removed`` (``[count, sum_1, sum_2]``: the shards'
        :func:`removed_digest` summed, mod 2**64), ``rounds`` and ``settled`` (the folder of the
        settled rows, per shard).
    """
    folder = Path(folder)
    settled, rounds = connect(engine, folder / "components", shards, desc="dedup clusters")
    names = [{"shards": shards, "name": f"{s:05d}"} for s in range(shards)]
    local = engine.map(
        settle_shard,
        [
            {
                **name,
                "rows": settled / f"s{s:05d}",
                "keys": folder / "keys" / f"s{s:05d}",
                "removed": folder / "removed",
                "candidates": folder / "candidates",
            }
            for s, name in enumerate(names)
        ],
        desc="dedup keepers",
    )
    kept = engine.map(
        keep_smallest,
        [
            {
                **name,
                "candidates": folder / "candidates" / f"s{s:05d}",
                "removed": folder / "removed",
                "keepers": folder / "keepers",
            }
            for s, name in enumerate(names)
        ],
        desc="dedup keepers",
    )
    removed = [*local, *kept]
    count = sum(r["count"] for r in removed)
    return {
        "near_removed": count,
        "clusters": sum(r["clusters"] for r in kept),
        "removed": [count, *(sum(r[key] for r in removed) % 2**64 for key in ("sum_1", "sum_2"))],
        "rounds": rounds,
        "settled": settled,
    }


def count_straddling(engine: Any, folder: Path, shards: int, settled: Path) -> int:
    """The confirmed pairs across parts with neither side removed, counted per shard (after :func:`remove_components`).

    The pairs in ``across/s<shard>/`` (routed by their first side, :func:`confirm_bucket`) lose
    those whose first side is removed, move to their second side's shard and lose those whose
    second side is removed (:func:`straddle`, twice); what is left is counted.
    """
    folder = Path(folder)
    left: list[dict[str, int]] = []
    for column, source, out in ((0, "across", folder / "across-left"), (1, "across-left", None)):
        left = engine.map(
            straddle,
            [
                {
                    "pairs": folder / source / f"s{s:05d}",
                    "column": column,
                    "rows": Path(settled) / f"s{s:05d}",
                    "keepers": folder / "keepers" / f"s{s:05d}",
                    "out": out,
                    "shards": shards,
                    "name": f"{s:05d}",
                }
                for s in range(shards)
            ],
            desc="dedup straddling",
        )
    return sum(r["left"] for r in left)


def apply_removals(item: dict[str, Any]) -> dict[str, Any]:
    """One partition's remove lists applied to its keep mask; its kept rows and text bytes.

    Item keys: ``documents`` (the DocumentSet, before deduplication), ``part``, ``partition``,
    ``mask`` (its exact-duplicate keep mask, rewritten), ``removed`` (the folder of every shard's
    remove lists: this partition may have none, one or one per shard).
    """
    from lightning_order.data.engine.partitions import read_table

    keep = np.load(item["mask"])
    lists = removal_paths(Path(item["removed"]), int(item["part"]), int(item["partition"]))
    for path in lists:
        keep[np.load(path)] = False
    if lists:
        save_array(item["mask"], keep)
    documents: DocumentSet = item["documents"]
    path = documents.path(int(item["partition"]))
    size = 0
    if path.exists():
        lengths = pc.binary_length(read_table(path, ["text"]).column("text")).to_numpy(zero_copy_only=False)
        size = int(lengths[keep].sum())
    return {"rows": int(keep.sum()), "text_bytes": size}


def removal_path(folder: Path, part: int, partition: int, shard: str = "all") -> Path:
    """Where ``shard``'s remove list of ``partition`` of ``part`` goes under ``folder``.

    One folder per partition, so that :func:`apply_removals` lists its own lists only (never
    every shard's folder: partitions x shards look-ups on a shared file system).
    """
    return Path(folder) / f"{int(part)}-{int(partition):05d}" / f"{shard}.npy"


def removal_paths(folder: Path, part: int, partition: int) -> list[Path]:
    """Every shard's remove list of ``partition`` of ``part`` under ``folder``, in name order."""
    return sorted(removal_path(folder, part, partition).parent.glob("*.npy"))

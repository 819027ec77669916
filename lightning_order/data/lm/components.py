"""Connected components in rounds on the workers, sharded by node: no task holds more than its shard.

The state is a set of rows ``(node, label)`` with ``label <= node``; its edges connect the same
documents as the confirmed pairs, and every label is itself a node with a row (a component's
smallest node has the row ``(root, root)``: the caller writes round 0 so). Each node belongs to one of ``K`` *shards*, picked by
a hash of its id (:func:`shard_of`); ``K`` comes from the step's buckets, never from the worker
count, so the shards and the result are the same on any engine. A round is two maps,
each task reading the files addressed to its shard and writing one file per destination shard:

* **A, by node** (:func:`hook`): each node's label becomes the smallest of its labels ``m``; each
  other label ``l`` of it is *hooked* under ``m`` (the row ``(l, m)``). The rows written go to
  their node's shard (as that node's own labels) and to their label's shard (as *children*).
* **B, by label** (:func:`jump`): each child row ``(v, u)`` meets ``u``'s own labels and jumps one
  level, to ``v -> min label(u)`` (pointer jumping); the rows go to ``v``'s shard for the next A.

No round joins two components or splits one (a row ``(v, u)`` becomes ``(v, l)`` for a label
``l`` of ``u``, and every chain of smallest labels ends at a node labelled by itself, which
keeps ``u`` and ``l`` joined) and no row is added (A writes
one row per distinct label of a node, B one per child row), so the rows never exceed the first
round's. The driver (:func:`connect`) loops on the counts the tasks return: the rows stop
changing when no node has two labels (A hooked nothing) and every label is its own label (B moved
nothing). The state is then a star per component, around its smallest node.
:data:`MAX_ROUNDS` guards the loop (pointer jumping about halves the depth of the chains of
labels each round: a chain of 2 000 documents in random order settles in 9 rounds).

Skew: B's task for a shard holds every row whose label is in it, so a cluster of ``n``
near-duplicates puts up to ``n`` rows on its smallest node's shard (16 B each), which is the bound
per task besides the shard's share.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.data.engine.storage import save_array
from lightning_order.data.lm.shingles import mix_hashes
from lightning_order.errors import DataError

__all__ = [
    "MAX_ROUNDS",
    "connect",
    "hook",
    "jump",
    "read_rows",
    "shard_of",
    "state_folder",
    "write_routed",
]

#: Rounds :func:`connect` runs before it gives up (each halves the depth of the label chains).
MAX_ROUNDS = 64
#: Salt of the node hash that picks a shard (a different spread from the band and pair buckets').
_SALT = 0x5EED


def shard_of(ids: np.ndarray, shards: int) -> np.ndarray:
    """Each document id's shard in ``range(shards)``: a hash of the id, the same on every worker."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1, 1)
    return (mix_hashes(ids.view(np.uint64), salt=_SALT) % np.uint64(shards)).astype(np.int64)


def write_routed(folder: Path, rows: np.ndarray, route: np.ndarray, name: str) -> None:
    """``rows`` written as ``folder/s<dest>/<name>.npy``, each row to the shard ``route`` gives it (none if empty)."""
    for dest in np.unique(route).tolist():
        path = Path(folder) / f"s{dest:05d}" / f"{name}.npy"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_array(path, rows[route == dest])


def read_rows(folder: Path, columns: int, dtype: Any = np.int64) -> np.ndarray:
    """Every ``.npy`` under ``folder`` (the files addressed to one shard) as one ``(n, columns)`` array."""
    folder = Path(folder)
    arrays = [np.load(path) for path in sorted(folder.glob("*.npy"))] if folder.is_dir() else []
    return np.concatenate([np.empty((0, columns), dtype=dtype), *arrays])


def hook(item: dict[str, Any]) -> dict[str, int]:
    """Round step A for one node shard: each node to its smallest label, its other labels hooked there.

    Item keys: ``rows`` (the folder of this shard's ``(node, label)`` files), ``own`` and
    ``children`` (the folders to route the written rows to, by node and by label), ``shards``,
    ``name`` (this shard's file name in each destination).

    Returns:
        ``hooked`` (labels hooked: 0 in every shard once each node has one label) and ``held``
        (bytes of the rows it held).
    """
    rows = np.unique(read_rows(item["rows"], 2), axis=0)  # sorted by node, then label
    first = np.r_[True, rows[1:, 0] != rows[:-1, 0]] if len(rows) else np.zeros(0, dtype=bool)
    smallest = rows[first, 1][np.cumsum(first) - 1]  # each row's node's smallest label
    # Each node under its smallest label, and each other label l of it under that one too.
    out = np.unique(
        np.concatenate([rows[first], np.stack([rows[~first, 1], smallest[~first]], axis=1)]), axis=0
    )
    shards, name = int(item["shards"]), str(item["name"])
    write_routed(item["own"], out, shard_of(out[:, 0], shards), name)
    write_routed(item["children"], out, shard_of(out[:, 1], shards), name)
    return {"hooked": int(np.count_nonzero(~first)), "held": int(rows.nbytes + out.nbytes)}


def jump(item: dict[str, Any]) -> dict[str, int]:
    """Round step B for one label shard: each child row ``(v, u)`` to ``(v, smallest label of u)``.

    Item keys: ``own`` (this shard's nodes' rows, from :func:`hook`), ``children`` (the rows
    whose label is in this shard), ``out`` (the next round's rows, routed by node), ``shards``,
    ``name``.

    Returns:
        ``moved`` (child rows whose label was not its own label: 0 once every label is a root)
        and ``held`` (bytes of the rows it held).
    """
    own = np.unique(read_rows(item["own"], 2), axis=0)
    children = np.unique(read_rows(item["children"], 2), axis=0)
    first = np.r_[True, own[1:, 0] != own[:-1, 0]] if len(own) else np.zeros(0, dtype=bool)
    nodes, labels = own[first, 0], own[first, 1]  # each node's smallest label
    at = np.searchsorted(nodes, children[:, 1])
    if len(children) and (at.max() >= len(nodes) or not np.array_equal(nodes[at], children[:, 1])):
        # Every label has a row of its own (the invariant of the module docstring): a broken one is a bug.
        raise DataError(
            f"a label without a row of its own in {item['children']}: the dedup scratch files are "
            "incomplete (a worker died mid-write?); delete the cache folder and prepare again",
            step="dedup",
        )
    jumped = labels[at]
    out = np.stack([children[:, 0], jumped], axis=1)
    write_routed(item["out"], out, shard_of(out[:, 0], int(item["shards"])), str(item["name"]))
    moved = int(np.count_nonzero(jumped != children[:, 1]))
    return {"moved": moved, "held": int(own.nbytes + children.nbytes + out.nbytes)}


def state_folder(folder: Path, round_: int) -> Path:
    """The folder of the ``(node, label)`` rows a round starts from (round 0: what the caller wrote)."""
    return Path(folder) / f"rows{round_:03d}"


def connect(engine: Any, folder: Path, shards: int, desc: str = "components") -> tuple[Path, int]:
    """The rows in ``state_folder(folder, 0)`` connected in rounds on ``engine``'s workers.

    Args:
        engine: runs the tasks (``map(fn, items, desc=...)``).
        folder: the scratch folder; round 0's rows are in ``state_folder(folder, 0)/s<shard>/``,
            routed by :func:`shard_of` their node.
        shards: ``K``, the number of shards (what the rows were routed with).
        desc: the progress label of the maps.

    Returns:
        The folder of the settled rows (each node once, under its component's smallest node,
        routed by node) and the number of rounds run (the last one changed nothing).

    Raises:
        DataError: the rows did not settle within :data:`MAX_ROUNDS` rounds.
    """
    folder = Path(folder)
    for done in range(MAX_ROUNDS):
        rows, own, children = state_folder(folder, done), folder / "own", folder / "children"
        names = [{"shards": shards, "name": f"{s:05d}"} for s in range(shards)]
        hooked = engine.map(
            hook,
            [
                {**n, "rows": rows / f"s{s:05d}", "own": own, "children": children}
                for s, n in enumerate(names)
            ],
            desc=f"{desc}, round {done + 1}",
        )
        shutil.rmtree(rows, ignore_errors=True)
        moved = engine.map(
            jump,
            [
                {
                    **n,
                    "own": own / f"s{s:05d}",
                    "children": children / f"s{s:05d}",
                    "out": state_folder(folder, done + 1),
                }
                for s, n in enumerate(names)
            ],
            desc=f"{desc}, round {done + 1}",
        )
        shutil.rmtree(own, ignore_errors=True)
        shutil.rmtree(children, ignore_errors=True)
        if not any(r["hooked"] for r in hooked) and not any(r["moved"] for r in moved):
            return state_folder(folder, done + 1), done + 1
    raise DataError(
        f"the near-duplicate clusters did not settle in {MAX_ROUNDS} rounds of {shards} shards "
        f"({folder}): this is a bug in lightning_order's dedup; report it with the corpus size",
        step="dedup",
    )

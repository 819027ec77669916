"""Issue #35 item 2: dedup's connected components in rounds, sharded by node, equal a union-find.

:func:`~lightning_order.data.lm.components.connect` on random graphs, long chains in random
order, stars, many small components and no edge at all, with 1, 2 and 7 shards, against the
union-find of ``test_grouping``; its guard on the rounds is a clear error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.lm import components
from lightning_order.errors import DataError
from tests.unit.data.lm.test_grouping import _reference_labels


def _rows(a: np.ndarray, b: np.ndarray, count: int) -> np.ndarray:
    """Round 0's rows for edges ``a``–``b``: ``(larger, smaller)`` and every node under itself."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    nodes = np.arange(count, dtype=np.int64)
    return np.concatenate([np.stack([np.maximum(a, b), np.minimum(a, b)], 1), np.stack([nodes, nodes], 1)])


def _connected(
    tmp_path: Path, a: np.ndarray, b: np.ndarray, count: int, shards: int
) -> tuple[list[int], int]:
    """Each node's label after :func:`components.connect`, and the rounds it took."""
    rows = _rows(a, b, count)
    start = components.state_folder(tmp_path, 0)
    components.write_routed(start, rows, components.shard_of(rows[:, 0], shards), "edges")
    settled, rounds = components.connect(LocalEngine(1), tmp_path, shards)
    final = np.unique(
        np.concatenate([components.read_rows(p, 2) for p in sorted(settled.glob("s*"))]), axis=0
    )
    # One row per node, and it sits in its node's shard.
    assert final[:, 0].tolist() == list(range(count))
    for folder in settled.glob("s*"):
        here = components.read_rows(folder, 2)[:, 0]
        assert set(components.shard_of(here, shards).tolist()) <= {int(folder.name[1:])}
    return final[:, 1].tolist(), rounds


def _chain(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    nodes = np.random.default_rng(seed).permutation(count)
    return nodes[:-1], nodes[1:]


def _graphs() -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    graphs: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
    for seed in range(3):
        rng = np.random.default_rng(seed)
        graphs[f"random-{seed}"] = (rng.integers(0, 300, 250), rng.integers(0, 300, 250), 300)
    graphs["chain"] = (*_chain(1500, 0), 1500)
    a, b = _chain(600, 1)
    c, d = _chain(600, 2)
    graphs["two chains"] = (np.r_[a, c + 600], np.r_[b, d + 600], 1200)
    rng = np.random.default_rng(3)
    leaves = rng.permutation(np.arange(1, 500))
    graphs["star around its largest node"] = (np.full(499, 499), np.r_[leaves[leaves != 499], 0], 500)
    graphs["star around a middle node"] = (np.full(499, 250), rng.permutation(np.r_[0:250, 251:500]), 500)
    pairs = rng.permutation(800).reshape(-1, 2)
    graphs["many pairs"] = (pairs[:, 0], pairs[:, 1], 800)
    graphs["no edge"] = (np.empty(0, np.int64), np.empty(0, np.int64), 50)
    return graphs


GRAPHS = _graphs()


@pytest.mark.parametrize("shards", [1, 2, 7])
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_sharded_components_equal_a_union_find(tmp_path, graph, shards):
    a, b, count = GRAPHS[graph]
    labels, rounds = _connected(tmp_path, a, b, count, shards)
    assert labels == _reference_labels(a.tolist(), b.tolist(), count)
    assert rounds <= 2 * int(np.log2(count)) + 2  # pointer jumping: logarithmic in the longest chain
    assert not any(p.name != components.state_folder(tmp_path, rounds).name for p in tmp_path.iterdir())


def test_no_rows_settle_in_one_round(tmp_path):
    assert components.connect(LocalEngine(1), tmp_path, 3) == (components.state_folder(tmp_path, 1), 1)


def test_rows_that_do_not_settle_in_the_guard_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(components, "MAX_ROUNDS", 2)
    rows = _rows(*_chain(1000, 0), 1000)
    components.write_routed(
        components.state_folder(tmp_path, 0), rows, components.shard_of(rows[:, 0], 2), "e"
    )
    with pytest.raises(DataError, match=r"step 'dedup'.*did not settle in 2 rounds of 2 shards") as error:
        components.connect(LocalEngine(1), tmp_path, 2)
    assert error.value.step == "dedup"


def test_a_label_without_its_own_row_is_a_clear_error(tmp_path):
    # (5, 3) without a row for 3: the invariant the rounds rely on, broken (a lost file).
    components.write_routed(components.state_folder(tmp_path, 0), np.array([[5, 3]]), np.array([0]), "e")
    with pytest.raises(DataError, match=r"step 'dedup'.*without a row of its own.*delete the cache folder"):
        components.connect(LocalEngine(1), tmp_path, 1)


def test_shards_are_a_function_of_the_id_and_k_only():
    ids = np.arange(10_000, dtype=np.int64) * 7919
    first, again = components.shard_of(ids, 7), components.shard_of(ids.copy(), 7)
    assert np.array_equal(first, again) and set(first.tolist()) == set(range(7))
    assert np.bincount(first).min() > 10_000 / 7 * 0.8  # spread evenly

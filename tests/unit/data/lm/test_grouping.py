"""Issue #35 item 2: dedup's grouping on the workers removes what the rule removes.

:func:`~lightning_order.data.lm.grouping.connected_labels` against a union-find written here; a
prepared corpus with clusters of near-duplicates across partitions against the in-memory rule
(:func:`dedup_reference.deduplicate`); no task returns a pair to the driver.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from dedup_reference import deduplicate

from lightning_order import OrderedLMDataModule
from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.lm import components, prepare
from lightning_order.data.lm.clusters import doc_ids
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.documents import clean_document
from lightning_order.data.lm.grouping import (
    connected_labels,
    count_straddling,
    removal_paths,
    remove_components,
    removed_digest,
)
from tests.work_items import RecordingEngine


def _reference_labels(a: list[int], b: list[int], count: int) -> list[int]:
    parent = list(range(count))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for x, y in zip(a, b):
        rx, ry = find(x), find(y)
        parent[max(rx, ry)] = min(rx, ry)
    return [find(x) for x in range(count)]


@pytest.mark.parametrize("seed", range(6))
def test_connected_labels_are_each_components_smallest_node(seed):
    rng = np.random.default_rng(seed)
    count = 400
    a, b = rng.integers(0, count, 300 + 50 * seed), rng.integers(0, count, 300 + 50 * seed)
    assert connected_labels(a, b, count).tolist() == _reference_labels(a.tolist(), b.tolist(), count)


def test_a_long_chain_in_any_order_is_one_component():
    nodes = np.random.default_rng(0).permutation(2000)
    labels = connected_labels(nodes[:-1], nodes[1:], 2000)
    assert set(labels.tolist()) == {0}
    assert connected_labels(np.empty(0, np.int64), np.empty(0, np.int64), 3).tolist() == [0, 1, 2]


def _keyed_graph(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Document ids over 2 parts x 3 partitions, random edges and a long chain between them, keys with ties."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([doc_ids(part, p, np.arange(100)) for part in (0, 1) for p in range(3)])
    a, b = rng.integers(0, len(ids), 250), rng.integers(0, len(ids), 250)
    chain = rng.permutation(len(ids))[:150]
    a, b = np.r_[a, chain[:-1]], np.r_[b, chain[1:]]
    keys = rng.integers(0, 3, (len(ids), 2)).astype(np.uint64)  # few keys: ties broken by the id
    return ids, a, b, keys


def _expected_removed(
    ids: np.ndarray, a: np.ndarray, b: np.ndarray, keys: np.ndarray
) -> tuple[set[int], int]:
    """The rule in memory: per union-find component of the touched documents, all but the smallest (key, id)."""
    labels = _reference_labels(a.tolist(), b.tolist(), len(ids))
    members: dict[int, list[int]] = {}
    for node in sorted(set(a.tolist()) | set(b.tolist())):
        members.setdefault(labels[node], []).append(node)
    removed: set[int] = set()
    for group in members.values():
        ranked = sorted(group, key=lambda n: (int(keys[n, 0]), int(keys[n, 1]), int(ids[n])))
        removed.update(int(ids[n]) for n in ranked[1:])
    return removed, len(members)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shards", [1, 2, 7])
def test_sharded_keepers_remove_what_the_rule_removes_and_count_what_straddles(tmp_path, seed, shards):
    ids, a, b, keys = _keyed_graph(seed)
    # What confirm_bucket writes: each edge's (larger, smaller) ids, every smaller id under itself, the keys.
    big, small = np.maximum(ids[a], ids[b]), np.minimum(ids[a], ids[b])
    rows = np.concatenate([np.stack([big, small], 1), np.stack([small, small], 1)])
    components.write_routed(
        components.state_folder(tmp_path / "components", 0),
        rows,
        components.shard_of(rows[:, 0], shards),
        "q",
    )
    keyed = np.concatenate([ids.view(np.uint64)[:, None], keys], axis=1)
    components.write_routed(tmp_path / "keys", keyed, components.shard_of(ids, shards), "q")
    found = remove_components(LocalEngine(1), tmp_path, shards)
    removed = {
        int(doc_ids(part, p, row))
        for part in (0, 1)
        for p in range(3)
        for path in removal_paths(tmp_path / "removed", part, p)
        for row in np.load(path).tolist()
    }
    expected, clusters = _expected_removed(ids, a, b, keys)
    assert removed == expected
    assert (found["near_removed"], found["clusters"]) == (len(expected), clusters)
    # The step's fingerprint hashes this digest: the same whatever K, equal to the whole set's.
    digest = removed_digest(np.array(sorted(expected)))
    assert found["removed"] == [digest["count"], digest["sum_1"], digest["sum_2"]]
    # Pairs across the parts (dedup after the split): counted when neither side is removed.
    rng = np.random.default_rng(seed + 10)
    across = np.stack([rng.choice(ids[:300], 80), rng.choice(ids[300:], 80)], 1)
    components.write_routed(tmp_path / "across", across, components.shard_of(across[:, 0], shards), "q")
    left = sum(not ({int(x), int(y)} & expected) for x, y in across)
    assert 0 < left < len(across)
    assert count_straddling(LocalEngine(1), tmp_path, shards, found["settled"]) == left


def test_the_removed_digest_is_a_multiset_hash():
    ids = doc_ids(1, 7, np.arange(1000))
    whole, parts = removed_digest(ids), [removed_digest(ids[i::3]) for i in range(3)]
    summed = {key: sum(p[key] for p in parts) % 2**64 for key in whole}
    assert summed == whole and removed_digest(ids[::-1]) == whole
    assert removed_digest(ids[1:]) != whole and removed_digest(np.r_[ids[:-1], ids[-1] + 1]) != whole
    assert removed_digest(np.empty(0, np.int64)) == {"count": 0, "sum_1": 0, "sum_2": 0}


def _clusters(path: Path, clusters: int, size: int) -> tuple[Path, list[str]]:
    """``clusters`` long stdlib docstrings with ``size - 1`` near-duplicates each (2 % of words changed), shuffled."""
    rng = random.Random(0)
    bases = [d for d in stdlib_corpus(3000) if len(d.split()) >= 150][:clusters]
    docs = list(stdlib_corpus(400))
    for base in bases:
        docs.append(base)
        words = base.split()
        for _ in range(size - 1):
            copy = list(words)
            for i in rng.sample(range(len(copy)), len(copy) // 50):
                copy[i] = copy[i] + "q"
            docs.append(" ".join(copy))
    rng.shuffle(docs)
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path, docs


@pytest.mark.slow
def test_clusters_across_partitions_remove_what_the_rule_removes(tmp_path, monkeypatch):
    engine = RecordingEngine()
    monkeypatch.setattr(prepare, "make_engine", lambda name, num_proc, address=None: engine)
    path, docs = _clusters(tmp_path / "docs.jsonl", clusters=6, size=40)
    dm = OrderedLMDataModule(
        "json",
        data_files=str(path),
        cache_dir=str(tmp_path / "c"),
        vocab_size=400,
        block_size=32,
        num_partitions=8,
        num_proc=1,
    )
    dm.prepare_data()
    dm.setup("fit")
    kept = sorted([*dm.documents("train"), *dm.documents("val")])
    # The rule in memory, on the same cleaned documents.
    cleaned = [c for c in (clean_document(d) for d in docs) if c.strip()]
    expected = deduplicate(cleaned, threshold=0.8, ngram=5, num_perm=256, seed=dm.config.seed)
    assert kept == sorted(cleaned[i] for i in expected.keep.tolist())
    stats = dm.ledger.latest("dedup").stats
    assert stats["clusters"] >= 6 and stats["near_removed"] >= 6 * 30
    # The grouping's results to the driver are counts and paths, never pairs.
    for task in (
        "route_pairs",
        "confirm_bucket",
        "hook",
        "jump",
        "settle_shard",
        "keep_smallest",
        "apply_removals",
    ):
        assert engine.largest_result[task] < 400, task

"""Issue #35 item 2: dedup's grouping on the workers removes what the rule removes.

:func:`~lightning_order.data.lm.grouping.connected_labels` against a union-find written here; a
prepared corpus with clusters of near-duplicates across partitions against the in-memory rule
(:func:`~lightning_order.data.lm.clusters.deduplicate`); no task returns a pair to the driver.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm import prepare
from lightning_order.data.lm.clusters import deduplicate
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.documents import clean_document
from lightning_order.data.lm.grouping import connected_labels
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
    for task in ("route_pairs", "confirm_bucket", "hook", "jump", "settle_shard", "keep_smallest", "apply_removals"):
        assert engine.largest_result[task] < 400, task

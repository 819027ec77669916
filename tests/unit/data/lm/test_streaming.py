"""The streaming LM prepare: canonical partitions make the data independent of who did the work.

Issue #23: one corpus prepared with ``num_proc=1`` and ``num_proc=2`` (real worker processes), and
by an engine that runs the partitions in reverse order with its work cut finer, gives identical ``data_fingerprints()``
and identical blocks; no kept validation document has a near-duplicate in train across
partitions; the tokenizer's sample is capped, deterministic and recorded; bad input still gets
one clear line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from dedup_reference import straddling_pairs

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.engine import engines
from lightning_order.data.lm import clusters, deduplication, file_ranges
from lightning_order.data.lm.artefacts import read_blocks
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.vocab import sample_threshold

SMALL = {"vocab_size": 400, "block_size": 32, "batch_size": 8, "num_partitions": 8}


def _planted(path: Path, count: int = 600, pairs: int = 60) -> Path:
    """Real documents and a near-duplicate (a few words changed) of ``pairs`` of them, shuffled, as JSON lines."""
    rng = random.Random(0)
    docs = [d for d in stdlib_corpus(count)]
    long = [d for d in docs if len(d.split()) >= 80]
    for doc in rng.sample(long, pairs):
        words = doc.split()
        for i in rng.sample(range(len(words)), max(1, len(words) // 60)):
            words[i] = words[i] + "x"
        docs.append(" ".join(words))
    rng.shuffle(docs)
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


class ReversedEngine(engines.LocalEngine):
    """Runs every map's items last to first (another assignment of partitions to work)."""

    name = "reversed"
    items: ClassVar[dict[str, int]] = {}  # work items per task, last map of each

    def map(self, fn, items, weight=None, desc=""):
        items = list(items)
        ReversedEngine.items[fn.__name__] = len(items)
        return list(reversed(super().map(fn, list(reversed(items)), weight, desc)))


def _prepared(tmp_path: Path, name: str, corpus: Path, **kwargs) -> OrderedLMDataModule:
    dm = OrderedLMDataModule(
        "json", data_files=str(corpus), cache_dir=str(tmp_path / name), **SMALL, **kwargs
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _planted(tmp_path_factory.mktemp("corpus") / "docs.jsonl")


@pytest.mark.slow
def test_one_and_two_processes_and_another_assignment_prepare_identical_data(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr(engines, "MIN_PARALLEL_BYTES", 0)  # real worker processes, even for a small corpus
    one = _prepared(tmp_path, "one", corpus, num_proc=1)
    two = _prepared(tmp_path, "two", corpus, num_proc=2)
    from lightning_order.data.lm import prepare

    monkeypatch.setattr(prepare, "make_engine", lambda name, num_proc, address=None: ReversedEngine(1))
    # Work cut finer (what bounds a worker's memory) changes nothing either: signatures 2 kB of text
    # at a time, candidate pairs confirmed 7 to a work item.
    monkeypatch.setattr(clusters, "SIGNATURE_BATCH_CHARS", 2000)
    monkeypatch.setattr(deduplication, "PAIRS_PER_TASK", 7)
    # ... and the input file read by workers in many ranges (issue #35 item 1), not one.
    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 20_000)
    other = _prepared(tmp_path, "reversed", corpus, num_proc=1)
    assert ReversedEngine.items["read_range"] == -(-corpus.stat().st_size // 20_000) > 10
    assert other.ledger.latest("dedup").stats["candidate_pairs"] > 7 * 4
    assert other.ledger.latest("load").stats["engine"] == "reversed"
    assert one.ledger.latest("load").stats["workers"] == 1 and two.ledger.latest("load").stats["workers"] == 2
    assert one.data_fingerprints() == two.data_fingerprints() == other.data_fingerprints()
    for split in ("train", "val"):
        blocks = [np.asarray(read_blocks(dm.cache_path)[split]) for dm in (one, two, other)]
        assert np.array_equal(blocks[0], blocks[1]) and np.array_equal(blocks[0], blocks[2])
        assert list(one.documents(split)) == list(two.documents(split)) == list(other.documents(split))
    assert one.tokenizer.to_str() == two.tokenizer.to_str() == other.tokenizer.to_str()


def test_no_kept_validation_document_has_a_near_duplicate_in_train(tmp_path, corpus):
    dm = _prepared(tmp_path, "one", corpus, num_proc=1)
    dedup = dm.ledger.latest("dedup").stats
    assert dedup["near_removed"] >= 50 and dm.ledger.latest("load").params["partitions"] == 8
    assert straddling_pairs(list(dm.documents("train")), list(dm.documents("val"))) == []
    # The same corpus deduplicated after the split (a wrong order) leaves pairs straddling it.
    order = ["load", "clean", "split", "dedup", "build_vocab", "encode", "pack", "shard"]
    wrong = _prepared(tmp_path, "wrong", corpus, num_proc=1, order=order, enforce=False)
    counted = wrong.ledger.latest("dedup").stats["straddling"]
    assert counted > 0
    assert len(straddling_pairs(list(wrong.documents("train")), list(wrong.documents("val")))) == counted


def test_the_tokenizer_sample_is_capped_deterministic_and_recorded(tmp_path, corpus):
    dm = _prepared(tmp_path, "capped", corpus, num_proc=1, tokenizer_train_bytes=64 << 10)
    record = dm.ledger.latest("build_vocab")
    assert record.params["tokenizer_train_bytes"] == 64 << 10 and record.params["source"] == "trained"
    assert 0 < record.stats["sample_bytes"] <= 64 << 10
    assert record.stats["sample_documents"] < record.stats["rows"]
    again = _prepared(tmp_path, "capped-again", corpus, num_proc=1, tokenizer_train_bytes=64 << 10)
    assert (
        again.ledger.latest("build_vocab").stats["sample_fingerprint"] == record.stats["sample_fingerprint"]
    )
    whole = _prepared(tmp_path, "whole", corpus, num_proc=1)
    assert (
        whole.ledger.latest("build_vocab").stats["sample_documents"]
        == whole.ledger.latest("build_vocab").stats["rows"]
    )


def test_sample_threshold_takes_documents_in_hash_order_up_to_the_cap():
    hashes = np.array([50, 10, 40, 20, 30], dtype=np.uint64)
    sizes = np.array([5, 5, 5, 5, 5], dtype=np.int64)
    assert sample_threshold(hashes, sizes, 12) == (20, 2, 10)
    assert sample_threshold(hashes, sizes, 1000) == (50, 5, 25)
    assert sample_threshold(hashes, sizes, 1) == (10, 1, 5)  # at least one document


def test_documents_are_lazy_and_in_canonical_order(tmp_path, corpus):
    dm = _prepared(tmp_path, "lazy", corpus, num_proc=1)
    docs = dm.documents("val")
    assert not isinstance(docs, list) and len(docs) == dm.ledger.latest("split").stats["val_rows"]
    assert docs[0] == next(iter(docs)) and docs[-1] == list(docs)[-1] and docs[1:3] == list(docs)[1:3]
    assert len(dm.key_hashes("val")) == len(docs)


@pytest.mark.parametrize(
    ("texts", "step", "words"),
    [
        ([None, None], "load", "null"),
        (["   ", "\n\n"], "clean", "no document is left after cleaning"),
    ],
)
def test_a_corpus_that_leaves_nothing_gets_one_line(tmp_path, texts, step, words):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), num_proc=1)
    with pytest.raises(DataError, match=words) as info:
        dm.prepare_data()
    assert info.value.step == step and "\n" not in str(info.value)
    assert not (tmp_path / "c" / dm.cache_key).exists()


def test_the_package_and_the_local_engine_never_import_ray():
    from helpers import in_fresh_process

    code = """
import json, sys
import lightning_order
from lightning_order.data.lm import prepare, tasks, cleaning, pack
from lightning_order.data.engine.engines import make_engine
engine = make_engine("local", 2)
assert engine.map(abs, [-1, -2, -3], weight=1 << 40) == [1, 2, 3]  # in worker processes
engine.close()
print(json.dumps([m for m in sys.modules if m == "ray" or m.startswith("ray.")]))
"""
    assert in_fresh_process(code) == []

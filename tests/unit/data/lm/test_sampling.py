"""Issue #35 item 2: the tokenizer's sample chosen on the workers, the same sample as the global rule.

:func:`~lightning_order.data.lm.sampling.merged_threshold` over per-file prefixes must give what
:func:`~lightning_order.data.lm.vocab.sample_threshold` gives over every document at once, and
a prepare must record that sample while no task returns a hash per document to the driver.
"""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm import prepare
from lightning_order.data.lm.sampling import SAMPLE_SEED, local_sample, merged_threshold, take_prefix
from lightning_order.data.lm.vocab import sample_threshold
from tests.work_items import RecordingEngine, tiny_corpus


@pytest.mark.parametrize("cap", [1, 50, 700, 2_000, 5_000, 9_000, 10**9])
def test_merged_file_prefixes_give_the_global_rule(tmp_path, cap):
    rng = np.random.default_rng(cap)
    hashes = rng.integers(0, 2**63, 600, dtype=np.uint64)
    sizes = rng.integers(1, 40, 600)
    sizes[rng.choice(600, 30, replace=False)] = rng.integers(200, 3000, 30)  # a few large ones end samples
    paths = []
    for i, rows in enumerate(np.array_split(np.arange(600), 7)):
        prefix = take_prefix(hashes[rows], sizes[rows], cap, stop=True)
        path = tmp_path / f"{i}.npy"
        both = [hashes[rows][prefix], sizes[rows][prefix].astype(np.uint64), prefix.astype(np.uint64)]
        np.save(path, np.stack(both, axis=1))
        paths.append(str(path))
    assert merged_threshold(paths, cap) == sample_threshold(hashes, sizes, cap)


def test_an_empty_train_split_has_no_threshold(tmp_path):
    path = tmp_path / "empty.npy"
    np.save(path, np.empty((0, 3), dtype=np.uint64))
    assert merged_threshold([str(path)], 100) == (-1, 0, 0)
    assert local_sample.__module__ == "lightning_order.data.lm.sampling"


@pytest.mark.parametrize(
    ("corpus", "cap"),
    [
        ("tiny", 4 << 10),
        ("tiny", 1 << 30),
        # Real documents of very different sizes: a large one ends the sample, in one file only.
        ("stdlib", 200_000),
    ],
)
def test_the_prepared_sample_is_the_rule_and_no_task_returns_a_hash_per_document(
    tmp_path, monkeypatch, corpus, cap
):
    engine = RecordingEngine()
    monkeypatch.setattr(prepare, "make_engine", lambda name, num_proc, address=None: engine)
    common = {"vocab_size": 400, "block_size": 16, "num_partitions": 8, "num_proc": 1}
    if corpus == "tiny":
        path = tiny_corpus(tmp_path / "docs.jsonl", 3000)
        dm = OrderedLMDataModule(
            "json", data_files=str(path), cache_dir=str(tmp_path / "c"), tokenizer_train_bytes=cap, **common
        )
    else:
        dm = OrderedLMDataModule(
            max_documents=1500, cache_dir=str(tmp_path / "c"), tokenizer_train_bytes=cap, **common
        )
    dm.prepare_data()
    dm.setup("fit")
    # The rule computed here, over every train document at once.
    encoded = [t.encode() for t in dm.documents("train")]
    hashes = np.array([xxhash.xxh3_64_intdigest(b, seed=SAMPLE_SEED) for b in encoded], dtype=np.uint64)
    sizes = np.array([len(b) for b in encoded])
    _, documents, size = sample_threshold(hashes, sizes, cap)
    stats = dm.ledger.latest("build_vocab").stats
    assert (stats["sample_documents"], stats["sample_bytes"], stats["rows"]) == (documents, size, len(hashes))
    assert (documents < len(hashes)) == (cap < 1 << 30)
    # What the sample's tasks send back is a few numbers per file, never a hash per document.
    assert engine.largest_result["local_sample"] < 200


def test_a_sample_drawn_before_clean_reads_the_input_chunks(tmp_path):
    """A wrong order (build_vocab before clean, enforce=False): the sample comes from the input's chunks."""
    path = tiny_corpus(tmp_path / "docs.jsonl", 500)
    order = ["load", "build_vocab", "clean", "dedup", "split", "encode", "pack", "shard"]
    dm = OrderedLMDataModule(
        "json",
        data_files=str(path),
        cache_dir=str(tmp_path / "c"),
        vocab_size=300,
        block_size=16,
        num_partitions=4,
        num_proc=1,
        tokenizer_train_bytes=4 << 10,
        order=order,
        enforce=False,
    )
    dm.prepare_data()
    stats = dm.ledger.latest("build_vocab").stats
    assert 0 < stats["sample_bytes"] <= 4 << 10 and stats["rows"] == 500

"""Issue #35 item 2: what the driver sends to a worker does not grow with the corpus.

Every work item of the LM prepare is pickled by a recording engine (as a process pool or Ray
would pickle it); the largest one must stay under a fixed bound whether the corpus has 400 or
4 000 documents, read by the workers in a few or many byte ranges (issue #35 item 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm import documents, file_ranges, prepare
from tests.work_items import RecordingEngine, tiny_corpus

#: Bytes a pickled work item may take, whatever the corpus: an item names its own files only.
ITEM_BOUND = 16 << 10


def _largest_items(tmp_path: Path, count: int, monkeypatch: pytest.MonkeyPatch) -> RecordingEngine:
    engine = RecordingEngine()
    monkeypatch.setattr(prepare, "make_engine", lambda name, num_proc, address=None: engine)
    corpus = tiny_corpus(tmp_path / f"docs-{count}.jsonl", count)
    dm = OrderedLMDataModule(
        "json",
        data_files=str(corpus),
        cache_dir=str(tmp_path / f"cache-{count}"),
        vocab_size=300,
        block_size=16,
        batch_size=4,
        num_partitions=4,
        num_proc=1,
        tokenizer_train_bytes=4 << 10,  # the sample's texts are bounded by this cap, not by the corpus
    )
    dm.prepare_data()
    return engine


@pytest.mark.slow
def test_the_largest_work_item_does_not_grow_with_thetiny_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "CHUNK_ROWS", 50)  # many batches per clean item
    monkeypatch.setattr(
        file_ranges, "RANGE_BYTES", 4096
    )  # and many load and clean items: the file read in ranges
    small = _largest_items(tmp_path, 400, monkeypatch)
    large = _largest_items(tmp_path, 4000, monkeypatch)
    print("largest pickled work item (bytes):", {"400 docs": small.largest, "4000 docs": large.largest})
    print(
        "largest pickled result (bytes):",
        {"400 docs": small.largest_result, "4000 docs": large.largest_result},
    )
    assert set(small.largest) == set(large.largest) and {"clean_chunk", "read_range"} <= set(large.largest)
    for task, size in large.largest.items():
        assert size <= ITEM_BOUND, f"{task}: a work item of {size} bytes"
        # The same partitions' descriptions, whatever the document count (a few digits of a path may differ).
        assert size <= small.largest[task] + 64, (
            f"{task}: {small.largest[task]} -> {size} bytes as the corpus grew 10x"
        )
    # What comes back is counts, digests and paths (a packed file's tail: less than a block), never a
    # list per document or pair.
    for task, size in large.largest_result.items():
        assert size <= small.largest_result[task] + 128, (
            f"{task}: results {small.largest_result[task]} -> {size}"
        )

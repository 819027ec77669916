"""Issue #35 item 2: what the driver sends to a worker does not grow with the corpus.

Every work item of the LM prepare is pickled by a recording engine (as a process pool or Ray
would pickle it); the largest one must stay under a fixed bound whether the corpus has 400 or
4 000 documents in 8 or 80 input chunks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm import documents, prepare
from tests.work_items import RecordingEngine, tiny_corpus

#: Bytes a pickled work item may take, whatever the corpus: an item names its own files only.
ITEM_BOUND = 16 << 10


def _largest_items(tmp_path: Path, count: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
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
    )
    dm.prepare_data()
    return engine.largest


@pytest.mark.slow
def test_the_largest_work_item_does_not_grow_with_thetiny_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "CHUNK_ROWS", 50)  # many chunks: 8, then 80
    small = _largest_items(tmp_path, 400, monkeypatch)
    large = _largest_items(tmp_path, 4000, monkeypatch)
    print("largest pickled work item (bytes):", {"400 docs": small, "4000 docs": large})
    assert set(small) == set(large) and "clean_chunk" in large
    for task, size in large.items():
        assert size <= ITEM_BOUND, f"{task}: a work item of {size} bytes"
        # The same partitions' descriptions, whatever the document count (a few digits of a path may differ).
        assert size <= small[task] + 64, f"{task}: {small[task]} -> {size} bytes as the corpus grew 10x"

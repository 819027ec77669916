"""``lightning_order.data.engine.partitions``: a prepared split's documents read as recorded, or refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_order import DataError, OrderedLMDataModule

SMALL = {"max_documents": 300, "vocab_size": 400, "block_size": 32, "batch_size": 8, "num_proc": 1}


@pytest.mark.parametrize("damage", ["deleted", "fewer rows"])
def test_a_documents_file_changed_under_a_live_datamodule_is_refused_not_skipped(tmp_path: Path, damage):
    dm = OrderedLMDataModule(**SMALL, num_partitions=4, cache_dir=str(tmp_path))
    documents = dm.documents("val")
    total = len(documents)
    files = sorted((dm.cache_path / "val" / "documents").glob("part-*.arrow"))
    victim = max(files, key=lambda p: p.stat().st_size)  # a partition that holds documents
    if damage == "deleted":
        victim.unlink()
    else:
        import pyarrow as pa

        table = pa.ipc.open_file(pa.BufferReader(victim.read_bytes())).read_all()
        shorter = victim.with_suffix(".new")
        with pa.OSFile(str(shorter), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table.slice(0, 1))
        shorter.replace(victim)
    assert len(documents) == total  # the manifest's count
    with pytest.raises(DataError) as info:
        list(documents)  # used to yield fewer documents than len() without a word
    message = str(info.value)
    assert info.value.step == "setup" and str(victim) in message
    assert ("missing" if damage == "deleted" else "holding 1 documents") in message
    assert "prepare again" in message and str(dm.cache_path) in message

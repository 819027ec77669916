"""``clean_chunk`` on one work item as large as a file range (issue #35 item 1)."""

from __future__ import annotations

import pyarrow as pa

from lightning_order.data.engine.partitions import read_table, write_table
from lightning_order.data.lm import documents
from lightning_order.data.lm.documents import ChunkSource
from lightning_order.data.lm.tasks import clean_chunk


def _cleaned(tmp_path, name: str, texts: list) -> tuple[dict, dict]:
    path = tmp_path / f"{name}.arrow"
    write_table(pa.table({"text": pa.array(texts, pa.large_string())}), path)
    item = {
        "source": (ChunkSource(3, 0, len(texts), path=str(path)), 3),
        "out": tmp_path / name,
        "partitions": 4,
        "clean": True,
        "eos_token": "<|endoftext|>",
        "hook": None,
    }
    found = clean_chunk(item)
    files = {
        p.relative_to(tmp_path / name).as_posix(): read_table(p)
        for p in sorted((tmp_path / name).rglob("*.arrow"))
    }
    return found, files


def test_a_range_is_cleaned_in_batches_into_one_fragment_per_partition_with_the_same_rows(
    tmp_path, monkeypatch
):
    texts = [f"document {i}  \n" if i % 9 else None for i in range(1000)] + ["   "]
    whole, one = _cleaned(tmp_path, "whole", texts)
    monkeypatch.setattr(documents, "CHUNK_ROWS", 64)  # 16 batches
    batched, many = _cleaned(tmp_path, "batched", texts)
    assert whole == batched and batched["fragments"] == 4 == len(many)
    assert sorted(many) == [f"p{p:05d}/f000003.arrow" for p in range(4)]
    assert all(one[name].equals(many[name].combine_chunks()) for name in many)
    assert (batched["rows_in"], batched["dropped_null"], batched["dropped_empty"]) == (1001, 112, 1)

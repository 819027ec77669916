"""``load``'s work items when workers read their own input (issue #35 item 1): planned from names and sizes only.

Which inputs take the worker path (local, uncompressed JSON lines, Parquet and text files) and
which keep ``datasets``' (csv, compressed files, a JSON array, a config name, another split,
``max_documents``); ranges that tile each file; and a whole prepare that gives the same data
through either path, with one file split across many work items.
"""

from __future__ import annotations

import gzip
import json
import pickle
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm import file_ranges, range_reading
from lightning_order.data.lm.artefacts import read_blocks
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.file_ranges import plan_ranges, worker_files
from lightning_order.data.lm.range_reading import read_range as real_read

SMALL = {"vocab_size": 400, "block_size": 32, "batch_size": 8, "num_partitions": 4, "num_proc": 1}


def _cfg(path: Path, **kwargs) -> SimpleNamespace:
    base = {
        "dataset": "json",
        "dataset_config": None,
        "max_documents": None,
        "text_column": "text",
        "sample_by": "line",
        "load_split": "train",
        "input_files": [str(path)],
    }
    return SimpleNamespace(**{**base, **kwargs})


@pytest.fixture
def jsonl(tmp_path) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(100)))
    return path


def test_local_json_lines_parquet_and_text_files_are_read_by_workers(jsonl):
    assert worker_files(_cfg(jsonl)) == [jsonl]
    assert worker_files(_cfg(jsonl, dataset="text")) == [jsonl]
    assert worker_files(_cfg(jsonl, input_files={"train": [str(jsonl)]})) == [jsonl]


@pytest.mark.parametrize(
    "change",
    [
        {"dataset": "csv"},
        {"dataset_config": "default"},
        {"max_documents": 10},
        {"load_split": "validation"},
        {"load_split": "train[:10%]"},
        {"input_files": ["https://example.com/docs.jsonl"]},
        {"dataset": "text", "text_column": "body"},
    ],
    ids=["csv", "config", "max-documents", "other-split", "split-slice", "remote", "text-column"],
)
def test_other_inputs_keep_the_datasets_path(jsonl, change):
    assert worker_files(_cfg(jsonl, **change)) is None


def test_compressed_files_and_a_json_array_keep_the_datasets_path(tmp_path, jsonl):
    packed = tmp_path / "docs.jsonl.data"  # compressed, whatever its name says
    packed.write_bytes(gzip.compress(jsonl.read_bytes()))
    array = tmp_path / "array.json"
    array.write_bytes(b"\xef\xbb\xbf  \n[" + json.dumps({"text": "a"}).encode() + b"]")
    assert worker_files(_cfg(packed)) is None and worker_files(_cfg(array)) is None


@pytest.mark.parametrize("size", [1, 100, 1 << 20])
def test_byte_ranges_tile_each_file_in_corpus_order(tmp_path, jsonl, size):
    other = tmp_path / "other.jsonl"
    other.write_text(jsonl.read_text()[:500])
    ranges = plan_ranges(_cfg(jsonl), [jsonl, other], size)
    assert [r.index for r in ranges] == list(range(len(ranges)))
    for path in (jsonl, other):
        mine = [(r.start, r.stop) for r in ranges if r.path == str(path)]
        assert mine[0][0] == 0 and mine[-1][1] == path.stat().st_size
        assert all(a[1] == b[0] for a, b in pairwise(mine))
    assert max(len(pickle.dumps(r)) for r in ranges) < 400  # names a file and two numbers: O(1)


def test_text_by_paragraph_or_document_is_one_item_per_file(jsonl):
    for sample_by in ("paragraph", "document"):
        (whole,) = plan_ranges(_cfg(jsonl, dataset="text", sample_by=sample_by), [jsonl], 1)
        assert (whole.start, whole.stop) == (0, jsonl.stat().st_size)


def _prepare(tmp_path: Path, name: str, dataset: str, path: Path, **kwargs) -> OrderedLMDataModule:
    dm = OrderedLMDataModule(dataset, data_files=str(path), cache_dir=str(tmp_path / name), **SMALL, **kwargs)
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["json", "text"])
def test_a_file_split_across_many_items_prepares_the_data_datasets_path_prepares(
    tmp_path, monkeypatch, dataset
):
    docs = stdlib_corpus(300)
    if dataset == "json":
        path = tmp_path / "docs.jsonl"
        path.write_text(
            "\r\n".join(json.dumps({"text": d}) for d in docs) + "\n" + json.dumps({"text": None})
        )
    else:
        path = tmp_path / "docs.txt"
        path.write_text("\n\n".join(docs), newline="\r\n")
    kwargs = {"sample_by": "paragraph"} if dataset == "text" else {}
    real = worker_files
    monkeypatch.setattr(file_ranges, "worker_files", lambda cfg: None)
    reference = _prepare(tmp_path, "datasets", dataset, path, **kwargs)
    monkeypatch.setattr(file_ranges, "worker_files", real)
    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 4096)
    read = []
    monkeypatch.setattr(range_reading, "read_range", lambda item: read.append(item) or real_read(item))
    split = _prepare(tmp_path, "workers", dataset, path, **kwargs)
    assert len(read) == (-(-path.stat().st_size // 4096) if dataset == "json" else 1)
    stats = [
        {k: v for k, v in dm.ledger.latest("load").stats.items() if k != "seconds"}
        for dm in (reference, split)
    ]
    assert stats[0] == stats[1] and stats[0]["null_rows"] == (1 if dataset == "json" else 0)
    assert reference.data_fingerprints() == split.data_fingerprints()
    for part in ("train", "val"):
        assert list(reference.documents(part)) == list(split.documents(part))
        assert np.array_equal(
            np.asarray(read_blocks(reference.cache_path)[part]),
            np.asarray(read_blocks(split.cache_path)[part]),
        )


@pytest.mark.parametrize(
    ("total", "workers", "size"),
    [
        (10 << 30, 2, file_ranges.RANGE_BYTES),  # a large input: ranges of the fixed size
        (40 << 20, 2, 5 << 20),  # a mid-sized one: about four items a worker, so none idles
        (100 << 10, 8, file_ranges.MIN_RANGE_BYTES),  # a small one: never cut below the floor
    ],
)
def test_ranges_give_every_worker_work_within_bounds(total, workers, size):
    assert file_ranges.range_size(total, workers) == size


@pytest.mark.slow
def test_one_large_row_group_is_cleaned_by_several_items_into_the_same_data(tmp_path, monkeypatch):
    """A Parquet file written as one row group is one ``load`` item; ``clean`` cuts it in slices of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lightning_order.data.lm import tasks

    docs = stdlib_corpus(300)
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": docs}), path, row_group_size=len(docs))
    real = worker_files
    monkeypatch.setattr(file_ranges, "worker_files", lambda cfg: None)
    reference = _prepare(tmp_path, "datasets", "parquet", path)
    monkeypatch.setattr(file_ranges, "worker_files", real)
    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 4096)
    monkeypatch.setattr(file_ranges, "MIN_RANGE_BYTES", 4096)
    cleaned, clean = [], tasks.clean_chunk
    monkeypatch.setattr(tasks, "clean_chunk", lambda item: cleaned.append(item.source[0]) or clean(item))
    sliced = _prepare(tmp_path, "workers", "parquet", path)
    text_bytes = sum(len(d.encode()) for d in docs)
    assert len(cleaned) >= text_bytes // 4096 // 2  # not one item: slices of about 4 KB of text
    assert cleaned[0].start == 0 and cleaned[-1].stop == len(docs)
    assert all(a.stop == b.start for a, b in pairwise(cleaned))  # every row once, in corpus order
    assert reference.data_fingerprints() == sliced.data_fingerprints()
    for part in ("train", "val"):
        assert list(reference.documents(part)) == list(sliced.documents(part))

"""Both splits as row selections of one ``datasets`` table of packed blocks (a split after packing)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.callbacks.validator.overlap import column_stream, table_blocks
from lightning_order.checks.packed_split import check_packed_split, cut_windows
from lightning_order.checks.windows import check_window_overlap, window_overlap

datasets = pytest.importorskip("datasets")

EOS = 0
BLOCK = 8


def _documents(n: int = 60, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(1, 500, size=int(rng.integers(20, 60)))] + [EOS] for _ in range(n)]


def _pack(docs: list[list[int]]):
    stream = [t for d in docs for t in d]
    rows = [stream[i : i + BLOCK] for i in range(0, len(stream) - BLOCK + 1, BLOCK)]
    return datasets.Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * BLOCK for _ in rows]})


def _verdict(found):
    cut = cut_windows(
        found["stream"], found["train_starts"], found["val_starts"], found["window"], found["stride"], (EOS,)
    )
    return check_packed_split(cut, whole=found["whole"], window=found["window"], stride=found["stride"])


def test_blocks_shuffled_and_split_after_packing_are_one_table_and_raise_train_val_overlap():
    split = _pack(_documents()).shuffle(seed=0).train_test_split(test_size=0.2, seed=0)
    found = table_blocks(split["train"], split["test"])
    assert found is not None and found["window"] == found["stride"] == BLOCK and found["whole"]
    assert np.intersect1d(found["train_starts"], found["val_starts"]).size == 0
    [violation] = _verdict(found)
    assert violation.rule == "train-val-overlap" and "packed blocks" in violation.message
    assert "split the documents first" in violation.fix


def test_documents_split_before_packing_are_two_tables_and_silent():
    docs = _documents()
    text = datasets.Dataset.from_dict({"doc": list(range(len(docs)))}).train_test_split(test_size=0.2, seed=0)
    train = _pack([docs[i] for i in text["train"]["doc"]])
    val = _pack([docs[i] for i in text["test"]["doc"]])
    assert table_blocks(train, val) is None


def test_padded_documents_split_after_tokenizing_are_not_blocks():
    docs = [d[:BLOCK] + [EOS] * (BLOCK - len(d[:BLOCK])) for d in _documents()]
    masks = [[1] * (BLOCK - 1) + [0] for _ in docs]
    rows = datasets.Dataset.from_dict({"input_ids": docs, "attention_mask": masks})
    split = rows.train_test_split(test_size=0.2, seed=0)
    assert table_blocks(split["train"], split["test"]) is None


def test_plain_sequences_are_not_arrow_datasets():
    assert table_blocks([[1, 2]], [[3, 4]]) is None


def _overlap(train_docs: list[list[int]], val_docs: list[list[int]]):
    train, val = column_stream(_pack(train_docs)), column_stream(_pack(val_docs))
    assert train is not None and val is not None and train[1] == val[1] == BLOCK
    return check_window_overlap(window_overlap(val[0], [train[0]], val[1], (EOS,)))


def test_twin_documents_on_both_sides_of_the_split_raise_train_val_overlap():
    docs = _documents(80)
    train, val = docs[:60], docs[60:]
    [violation] = _overlap(train + val[:10], val)  # half the validation documents dedup missed
    assert violation.rule == "train-val-overlap"


def test_distinct_documents_on_each_side_are_silent():
    docs = _documents(80)
    assert _overlap(docs[:60], docs[60:]) == []


def test_column_stream_reads_only_the_splits_rows_in_order():
    table = _pack(_documents())
    part = table.select(range(3, 7))
    found = column_stream(part)
    assert found is not None
    assert found[0].tolist() == [t for row in table["input_ids"][3:7] for t in row]
    assert column_stream([[1, 2, 3]]) is None

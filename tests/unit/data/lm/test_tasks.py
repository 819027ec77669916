"""The LM tasks: ``clean_chunk`` on one work item as large as a file range (issue #35 item 1); the typed work items (#44)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lightning_order.data.engine.partitions import DocumentSet, read_table, write_table
from lightning_order.data.lm import documents, tasks
from lightning_order.data.lm.documents import ChunkSource
from lightning_order.data.lm.tasks import CleanItem, clean_chunk


def _cleaned(tmp_path, name: str, texts: list) -> tuple[dict, dict]:
    path = tmp_path / f"{name}.arrow"
    write_table(pa.table({"text": pa.array(texts, pa.large_string())}), path)
    item = CleanItem(
        (ChunkSource(3, 0, len(texts), path=str(path)), 3), tmp_path / name, 4, True, "<|endoftext|>"
    )
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


_DOCS = DocumentSet(Path("/cache/work/clean-all"), 8, True, 1000, 1 << 20)
#: One work item of each task, as the steps build them.
ITEMS = [
    CleanItem((_DOCS, 3), Path("/w/fragments"), 8, True, "<|endoftext|>", None),
    tasks.MergeItem(3, Path("/w/fragments/p00003"), Path("/w")),
    tasks.FolderItem(Path("/w/fragments/p00003")),
    tasks.DedupItem(_DOCS, 3, 0, Path("/w/masks"), Path("/w/bands"), 8, 0.8, 5, 128, 0),
    tasks.PairsItem(np.arange(6, dtype=np.int64).reshape(3, 2), {0: _DOCS}, 0.8, 5),
    tasks.SplitItem(_DOCS, 3, 0.1, 0, {"train": Path("/w/train"), "val": Path("/w/val")}, 2, 8),
    tasks.EncodeItem(_DOCS, 3, "/w/tokenizer.json", 0, None, 320, "/w/train/part-00003.npy", "train", False),
    tasks.PackItem("/w/train/part-00003.npy", "/w/blocks/part-00003.npy", 128, 0),
]


def _plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


@pytest.mark.parametrize("item", ITEMS, ids=lambda item: type(item).__name__)
def test_a_work_item_round_trips_through_pickle_and_stays_as_small_as_its_dict(item) -> None:
    """Items travel to worker processes and Ray workers pickled: the same fields come back, frozen,
    and the dataclass costs at most its class's name over the dict it replaced."""
    back = pickle.loads(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
    assert type(back) is type(item)
    for f in dataclasses.fields(item):
        assert _plain(getattr(back, f.name)) == _plain(getattr(item, f.name)), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.__setattr__(dataclasses.fields(item)[0].name, None)
    typed = len(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
    fields = {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}  # the dict it replaced
    plain = len(pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL))
    assert typed <= plain + 64, (typed, plain)


def test_every_task_takes_a_typed_item() -> None:
    """No ``dict[str, Any]`` item is left in ``tasks.py``: each task names its item's class."""
    for name in ("clean_chunk", "merge_partition", "remove_folder", "dedup_bands", "group_bucket",
                 "confirm_pairs", "split_partition", "encode_partition", "pack_partition"):  # fmt: skip
        annotation = inspect.signature(getattr(tasks, name)).parameters["item"].annotation
        assert annotation.endswith("Item"), (name, annotation)

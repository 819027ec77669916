"""Issue #35: the LM cache is written and hashed by the workers; the driver holds records and counts.

Before, ``write_lm_prepared`` read every partition's document hashes into one array on the
driver (8 bytes a document) and hashed every file of the cache there, serially.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.engine.cache import TEMP_MARKER
from lightning_order.data.engine.storage import concatenate_arrays, file_digest, file_records, save_array
from lightning_order.data.lm import prepare
from lightning_order.ledger import MANIFEST_NAME
from tests.work_items import RecordingEngine, tiny_corpus


def _prepare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: RecordingEngine) -> Path:
    monkeypatch.setattr(prepare, "make_engine", lambda name, num_proc, address=None: engine)
    dm = OrderedLMDataModule(
        "json",
        data_files=str(tiny_corpus(tmp_path / "docs.jsonl", 600)),
        cache_dir=str(tmp_path / "cache"),
        vocab_size=300,
        block_size=16,
        batch_size=4,
        num_partitions=4,
        num_proc=1,
    )
    dm.prepare_data()
    (folder,) = [p for p in (tmp_path / "cache").iterdir() if (p / MANIFEST_NAME).exists()]
    return folder


class _HashCounter(RecordingEngine):
    """A recording engine that also notes which task functions ran as work items."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[str] = []

    def map(self, fn, items, weight=None, desc=""):
        self.tasks.append(fn.__name__)
        return super().map(fn, items, weight, desc)


def test_the_documents_are_placed_and_every_large_file_hashed_by_work_items(tmp_path, monkeypatch):
    engine = _HashCounter()
    _prepare(tmp_path, monkeypatch, engine)
    assert engine.tasks.count("place_documents") == 2  # train and val
    assert engine.tasks.count("hash_file") == 2
    # what comes back is a record and a count, never a document's hash
    assert engine.largest_result["place_documents"] < 512
    assert engine.largest_result["hash_file"] < 512


def test_the_manifest_lists_exactly_what_hashing_the_folder_gives(tmp_path, monkeypatch):
    folder = _prepare(tmp_path, monkeypatch, RecordingEngine())
    listed = json.loads((folder / MANIFEST_NAME).read_text())["info"]["files"]
    assert listed == file_records(folder, skip=(MANIFEST_NAME, TEMP_MARKER, "work"))
    assert any(name.startswith("train/documents/") for name in listed)
    assert any(name.startswith("train/blocks/part-") for name in listed)


def test_doc_hashes_are_the_documents_hashes_in_canonical_order(tmp_path, monkeypatch):
    import pyarrow.ipc as ipc

    folder = _prepare(tmp_path, monkeypatch, RecordingEngine())
    for split in ("train", "val"):
        parts = sorted((folder / split / "documents").glob("part-*.arrow"))
        expected = np.concatenate(
            [ipc.open_file(str(p)).read_all().column("doc_hash").to_numpy() for p in parts]
        )
        np.testing.assert_array_equal(np.load(folder / split / "doc_hashes.npy"), expected)


def test_concatenate_arrays_writes_what_numpy_concatenates(tmp_path):
    arrays = [np.arange(5, dtype=np.int64), np.empty(0, np.int64), np.array([-3, 7], np.int64)]
    parts = []
    for i, array in enumerate(arrays):
        save_array(tmp_path / f"p{i}.npy", array)
        parts.append(tmp_path / f"p{i}.npy")
    assert concatenate_arrays(tmp_path / "all.npy", parts, np.int64) == 7
    np.testing.assert_array_equal(np.load(tmp_path / "all.npy"), np.concatenate(arrays))
    empty = tmp_path / "none.npy"
    assert concatenate_arrays(empty, [], np.int64) == 0
    assert np.load(empty).shape == (0,)
    assert file_digest(tmp_path / "all.npy") != file_digest(empty)


def test_concatenate_arrays_replaces_a_planted_link_and_leaves_its_target(tmp_path):
    target = tmp_path / "user-file"
    target.write_text("keep me")
    (tmp_path / "all.npy").symlink_to(target)
    save_array(tmp_path / "p.npy", np.arange(3, dtype=np.int64))
    concatenate_arrays(tmp_path / "all.npy", [tmp_path / "p.npy"], np.int64)
    assert target.read_text() == "keep me"
    assert not (tmp_path / "all.npy").is_symlink()

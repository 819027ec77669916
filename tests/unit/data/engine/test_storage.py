"""The verified cache: every prepared file is hashed in the manifest and verified before it is trusted."""

from __future__ import annotations

import errno
import json
import os
import shutil
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from helpers import mounted_tmpfs

from lightning_order import CacheWarning, OrderedDataModule
from lightning_order.cli import main
from lightning_order.data.engine import cache, storage
from lightning_order.data.engine.storage import (
    file_digest,
    file_records,
    replace_file,
    save_array,
    storage_error,
    verify_files,
    write_new,
)
from lightning_order.data.text import load as load_module
from lightning_order.ledger import StepLedger

TINY = {"demo_size": 600, "vocab_size": 200, "max_length": 16}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, str, dict[str, str]]:
    """A cache root holding one prepared tiny pipeline: (root, cache key, data fingerprints)."""
    root = tmp_path_factory.mktemp("pristine")
    dm = OrderedDataModule(cache_dir=str(root), **TINY)
    dm.prepare_data()
    return root, dm.cache_key, dm.data_fingerprints()


@pytest.fixture
def preparations(monkeypatch):
    """The demo corpora generated from now on: one per preparation (the load step)."""
    calls = []
    real = load_module.make_demo_corpus

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(load_module, "make_demo_corpus", counting)
    return calls


def _copy(pristine, tmp_path) -> tuple[Path, Path]:
    root, key, _ = pristine
    shutil.copytree(root / key, tmp_path / key)
    return tmp_path, tmp_path / key


def _arrow(folder: Path) -> Path:
    return next((folder / "train").glob("*.arrow"))


def _flip_bit(path: Path) -> str:
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: only the bytes differ
    return path.relative_to(path.parents[1]).as_posix()


def _truncate(path: Path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path.relative_to(path.parents[1]).as_posix()


def _swap_token_ids(path: Path) -> str:
    text = path.read_text()
    vocab = json.loads(text)["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[10:12]  # ids 10 and 11: the swap keeps the file's size
    first, second = f'"{a}": 10,', f'"{b}": 11,'
    assert first in text and second in text
    swapped = text.replace(first, "\0").replace(second, f'"{b}": 10,').replace("\0", f'"{a}": 11,')
    path.write_text(swapped)
    assert len(swapped) == len(text)
    return "tokenizer.json"


def _edit_statistics(path: Path) -> str:
    stats = json.loads(path.read_text())
    stats["mean"][0] += 1.0
    path.write_text(json.dumps(stats, indent=2, sort_keys=True))
    return "statistics.json"


DAMAGES = {
    "flip-one-bit-in-arrow": lambda f: _flip_bit(_arrow(f)),
    "truncate-arrow": lambda f: _truncate(_arrow(f)),
    "empty-arrow": lambda f: (_arrow(f).write_bytes(b""), _arrow(f).relative_to(f).as_posix())[1],
    "delete-arrow": lambda f: (name := _arrow(f).relative_to(f).as_posix(), (f / name).unlink())[0],
    "empty-state-json": lambda f: ((f / "val" / "state.json").write_text(""), "val/state.json")[1],
    "swap-token-ids": lambda f: _swap_token_ids(f / "tokenizer.json"),
    "edit-statistics": lambda f: _edit_statistics(f / "statistics.json"),
}
WORDS = {
    "flip-one-bit-in-arrow": "content changed",
    "truncate-arrow": "truncated",
    "empty-arrow": "empty",
    "delete-arrow": "missing",
    "empty-state-json": "empty",
    "swap-token-ids": "content changed",
    "edit-statistics": "",
}


def test_the_manifest_lists_every_prepared_file(pristine):
    root, key, _ = pristine
    files = StepLedger.load(root / key).info["files"]
    names = set(files)
    assert {"tokenizer.json", "statistics.json", "train/state.json", "val/dataset_info.json"} <= names
    assert any(n.startswith("train/") and n.endswith(".arrow") for n in names)
    assert "manifest.json" not in names
    on_disk = {p.relative_to(root / key).as_posix() for p in (root / key).rglob("*") if p.is_file()}
    assert on_disk - names == {"manifest.json", cache.TEMP_MARKER}  # the marker: the library wrote it
    assert all(files[n]["xxh3"] == file_digest(root / key / n) for n in names)
    assert verify_files(root / key, files) == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_file_is_named_rebuilt_and_the_good_cache_then_kept(
    pristine, tmp_path, damage, preparations, capsys
):
    _, key, reference = pristine
    root, folder = _copy(pristine, tmp_path)
    name = DAMAGES[damage](folder)
    assert not cache.is_complete(folder, key)
    assert any(p.startswith(name) and WORDS[damage] in p for p in cache.cache_problems(folder, key))
    # audit verifies the same files, and exits non-zero naming the cache
    assert main(["audit", str(folder)]) == 2
    assert name in capsys.readouterr().out.replace("\n", "")
    with pytest.warns(CacheWarning, match=name.replace(".", r"\.")):
        fresh = OrderedDataModule(cache_dir=str(root), **TINY)
        fresh.setup("fit")
    assert len(preparations) == 1  # prepared anew, never trusted
    assert fresh.data_fingerprints() == reference
    assert next(iter(fresh.train_dataloader()))["input_ids"].shape[1] == TINY["max_length"]
    assert not list(root.glob(".tmp-*"))
    assert main(["audit", str(folder)]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        again = OrderedDataModule(cache_dir=str(root), **TINY)
        again.setup("fit")
    assert len(preparations) == 1  # the good cache is reused, not rebuilt
    assert again.data_fingerprints() == reference


def test_a_cache_without_file_hashes_is_not_trusted(pristine, tmp_path):
    key = pristine[1]
    _, folder = _copy(pristine, tmp_path)
    ledger = StepLedger.load(folder)
    del ledger.info["files"]
    ledger.save(folder)  # a valid manifest of an older version: no file list
    assert "cannot be verified" in cache.cache_problems(folder, key)[0]


def test_verify_files_reports_each_kind(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "b").write_bytes(b"y" * 100)
    records = file_records(tmp_path)
    (tmp_path / "a").write_bytes(b"x" * 99 + b"z")
    (tmp_path / "b").unlink()
    records["../outside"] = {"size": 1, "xxh3": ""}
    problems = verify_files(tmp_path, records)
    assert problems == [
        "../outside: not a path inside the cache folder",
        "a: content changed (its xxh3 hash differs from the manifest's)",
        "b: missing",
    ]


def test_verification_reads_each_byte_once_in_bounded_chunks(tmp_path, monkeypatch):
    """Hashing a file is one pass over its bytes, a bounded chunk at a time (never the whole file held)."""
    path = tmp_path / "blob"
    data = os.urandom(1 << 20) * 32  # 32 MiB
    path.write_bytes(data)
    chunks = []

    class Counting:
        def __init__(self):
            self.digest = xxhash.xxh3_128()

        def update(self, view):
            chunks.append(len(view))
            self.digest.update(view)

        def hexdigest(self):
            return self.digest.hexdigest()

    monkeypatch.setattr(storage, "xxhash", types.SimpleNamespace(xxh3_128=Counting))
    assert file_digest(path) == xxhash.xxh3_128(data).hexdigest()
    assert sum(chunks) == len(data) and max(chunks) < len(data) // 4


# -- writes that never follow a link, and a full disk that speaks (issue #32) ----------------------
@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root only): a disk that fills up."""
    with mounted_tmpfs(tmp_path / "tiny", "64k") as mount:
        yield mount


def test_save_array_writes_numpys_bytes(tmp_path: Path) -> None:
    for array in (np.arange(10, dtype=np.int32), np.zeros(0, np.int64), np.ones((3, 4), bool)):
        save_array(tmp_path / "ours.npy", array)
        np.save(tmp_path / "numpys.npy", array)
        assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "numpys.npy").read_bytes()


def test_a_full_disk_is_enospc_naming_the_file_and_no_file_is_left(tiny_disk: Path) -> None:
    """numpy's save said "N requested and M written" on a full disk, naming no file."""
    path = tiny_disk / "big.npy"
    with pytest.raises(OSError) as info:
        save_array(path, np.ones(1 << 20, np.int32))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert not path.exists()
    error = storage_error(info.value, "pack", tiny_disk)
    assert error is not None and error.step == "pack"
    assert "no space left on the device" in str(error) and str(path) in str(error)
    assert "free of 64.0 KiB on that file system" in str(error) and "cache_dir" in str(error)


@pytest.mark.parametrize("helper", [write_new, replace_file])
def test_a_link_at_the_name_is_never_written_through(tmp_path: Path, helper: Any) -> None:
    secret = tmp_path / "notes.txt"
    secret.write_bytes(b"mine")
    (tmp_path / "planted").symlink_to(secret)
    if helper is write_new:
        with pytest.raises(FileExistsError):
            write_new(tmp_path / "planted", b"theirs")
    else:
        replace_file(tmp_path / "planted", b"theirs")
        assert not (tmp_path / "planted").is_symlink() and (tmp_path / "planted").read_bytes() == b"theirs"
    assert secret.read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "planted"]

"""A prepared cache is hashed once per machine: later checks compare ``stat`` with the record, and still catch damage."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from lightning_order import CacheWarning, OrderedLMDataModule
from lightning_order.data.engine import cache, verification

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dm = OrderedLMDataModule(cache_dir=str(tmp_path_factory.mktemp("verified")), **SMALL)
    dm.prepare_data()
    return dm.cache_path


def _copy(prepared: Path, root: Path, age_s: float = 3600.0) -> Path:
    """The cache copied under ``root``, its files made ``age_s`` old (past the racy window)."""
    path = root / prepared.name
    shutil.copytree(prepared, path)
    when = time.time() - age_s
    for p in path.rglob("*"):
        os.utime(p, (when, when))
    return path


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    full = cache.cache_problems

    def counted(path: Path, key: str | None = None, required: Sequence[str] = ()) -> list[str]:
        calls.append(path)
        return full(path, key, required)

    monkeypatch.setattr(cache, "cache_problems", counted)
    return calls


def _damage(path: Path) -> Path:
    target = path / "train" / "blocks" / "part-00000.npy"
    with target.open("r+b") as handle:
        handle.seek(target.stat().st_size // 2)
        handle.write(b"\x7f" * 16)
    return target


def test_a_cache_verified_on_this_machine_is_not_hashed_again(prepared, tmp_path, monkeypatch):
    path = _copy(prepared, tmp_path)
    calls = _counting(monkeypatch)
    assert cache.is_complete(path, path.name) and len(calls) == 1
    assert verification.record_path(path, cache.default_cache_dir()).is_file()
    for _ in range(3):  # every later setup, every rank of this machine: a stat per file, no hashing
        assert cache.is_complete(path, path.name)
    assert len(calls) == 1


def test_a_file_damaged_after_the_record_is_caught_and_the_cache_prepared_anew(
    prepared, tmp_path, monkeypatch
):
    path = _copy(prepared, tmp_path)
    assert cache.is_complete(path, path.name)
    calls = _counting(monkeypatch)
    damaged = _damage(path)
    assert not cache.is_complete(path, path.name) and len(calls) == 1
    dm = OrderedLMDataModule(cache_dir=str(tmp_path), **SMALL)
    assert dm.cache_path == path
    with pytest.warns(CacheWarning, match=f"damaged.*{damaged.name}"):
        dm.prepare_data()
    assert cache.is_complete(path, path.name)


def test_a_racy_file_keeping_its_size_and_time_is_hashed_again(prepared, tmp_path):
    """Files written within the racy window of the record may hide a later write from a coarse clock."""
    path = _copy(prepared, tmp_path, age_s=0.0)
    assert cache.is_complete(path, path.name)
    target = path / "train" / "blocks" / "part-00000.npy"
    before = target.stat()
    _damage(path)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same size and time
    assert not cache.is_complete(path, path.name)


def test_each_machine_verifies_for_itself(prepared, tmp_path, monkeypatch):
    path = _copy(prepared, tmp_path)
    assert cache.is_complete(path, path.name)
    calls = _counting(monkeypatch)
    monkeypatch.setattr(verification, "_host", lambda: "another-node")
    assert cache.is_complete(path, path.name) and len(calls) == 1
    assert cache.is_complete(path, path.name) and len(calls) == 1


def test_a_record_of_another_build_is_not_trusted(prepared, tmp_path, monkeypatch):
    path = _copy(prepared, tmp_path)
    assert cache.is_complete(path, path.name)
    record = verification.record_path(path, cache.default_cache_dir())
    shutil.rmtree(path)
    _copy(prepared, tmp_path)  # the same key published again: another manifest inode
    calls = _counting(monkeypatch)
    assert record.is_file() and cache.is_complete(path, path.name) and len(calls) == 1

"""``lightning_order.data.engine.cache``: the cache folders, stale leftovers and the default root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lightning_order import DataError, OrderedDataModule
from lightning_order.data.engine import cache

TINY = {"demo_size": 600, "vocab_size": 200, "max_length": 16}


def test_cache_stale_leftovers_are_removed(tmp_path):
    key = "0" * 32
    tmp = cache.new_temp_dir(tmp_path, key)
    (tmp / "train").mkdir()
    half = tmp_path / key
    half.mkdir()
    (half / "manifest.json").write_text("{not json")
    assert not cache.is_complete(half, key)
    removed = cache.remove_stale(tmp_path, key)
    assert set(removed) == {tmp, half}
    assert not tmp.exists() and not half.exists()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert cache.default_cache_dir() == tmp_path
    monkeypatch.delenv(cache.CACHE_ENV)
    assert cache.default_cache_dir().name == "lightning_order"


# -- never write through a link (issue #32) --------------------------------------------------------
KEY = "ab" * 16


def _user_file(tmp_path: Path) -> Path:
    secret = tmp_path / "home" / "notes.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"the user's own bytes\n")
    return secret


@pytest.mark.parametrize("name", [f"{KEY}.lock", f"{KEY}.lock.json"])
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path: Path, name: str) -> None:
    secret = _user_file(tmp_path)
    root = tmp_path / "cache"
    root.mkdir()
    (root / name).symlink_to(secret)
    with pytest.raises(DataError) as info:
        cache.acquire_lock(root, KEY, None, "prepare_data")
    assert info.value.step == "prepare_data"
    assert str(root / name) in str(info.value) and "symbolic link" in str(info.value)
    assert "remove it" in str(info.value)
    assert secret.read_bytes() == b"the user's own bytes\n"
    assert (root / name).is_symlink()  # what the user planted is left as it is


def test_prepare_data_never_writes_the_lock_holder_through_a_link(tmp_path: Path) -> None:
    """``<key>.lock.json`` planted as a link to a user file: the file is not overwritten (issue #32)."""
    secret = _user_file(tmp_path)
    dm = OrderedDataModule(**TINY, cache_dir=str(tmp_path / "cache"))
    dm.cache_root.mkdir()
    holder = dm.cache_root / f"{dm.cache_key}.lock.json"
    holder.symlink_to(secret)
    with pytest.raises(DataError, match=r"lock\.json is a symbolic link") as info:
        dm.prepare_data()
    assert info.value.step == "prepare_data" and str(holder) in str(info.value)
    assert secret.read_bytes() == b"the user's own bytes\n"
    assert not dm.cache_path.exists() and not list(dm.cache_root.glob(".tmp-*"))


def test_the_lock_holder_is_replaced_never_followed(tmp_path: Path) -> None:
    """Were a link planted after the check, the holder's details replace the link, not its target."""
    secret = _user_file(tmp_path)
    lock = cache.acquire_lock(tmp_path, KEY, None, "prepare_data")
    try:
        holder = tmp_path / f"{KEY}.lock.json"
        holder.unlink()
        holder.symlink_to(secret)
        cache.acquire_lock(tmp_path, KEY, None, "prepare_data")  # re-entrant: writes the details again
    except DataError:
        pass  # refused before writing: as good
    finally:
        lock.release()
        lock.release()
    assert secret.read_bytes() == b"the user's own bytes\n"


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_every_cache_file_has_the_umask_mode_manifest_included(tmp_path: Path, umask: int) -> None:
    """``manifest.json`` was 0600 (mkstemp) while the rest was 0644: another uid could not read it."""
    old = os.umask(umask)
    try:
        dm = OrderedDataModule(**TINY, cache_dir=str(tmp_path))
        dm.prepare_data()
    finally:
        os.umask(old)
    modes = {
        p.relative_to(dm.cache_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in dm.cache_path.rglob("*")
        if p.is_file()
    }
    assert modes["manifest.json"] == 0o666 & ~umask
    assert set(modes.values()) == {0o666 & ~umask}, modes

"""``lightning_order.data.engine.cache``: the cache folders, stale leftovers and the default root."""

from __future__ import annotations

from lightning_order.data.engine import cache


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

"""The bounded local cache of files fetched from object storage (:mod:`lightning_order.data.engine.shard_cache`).

Against fsspec's in-memory filesystem: what is tested is the local side (verification, names,
eviction), not the store's protocol (tests/integration/test_s3_cache.py).
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import fsspec
import pytest
import xxhash

from lightning_order.data.engine import shard_cache
from lightning_order.data.engine.shard_cache import RemoteFiles, fetched_bytes, shard_cache_limit
from lightning_order.errors import DataError

FILES = {"train/blocks/a.npy": b"a" * 100, "train/blocks/b.npy": b"b" * 100, "train/blocks/c.npy": b"c" * 100}


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Path, dict]:
    """Three published files in memory://, their records, and a mirror path standing for them."""
    url = f"memory://cache-{uuid.uuid4().hex[:8]}/key"
    fs = fsspec.filesystem("memory")
    records = {}
    for name, data in FILES.items():
        fs.pipe_file(f"{url}/{name}", data)
        records[name] = {"size": len(data), "xxh3": xxhash.xxh3_128_hexdigest(data)}
    return url, tmp_path / "mirror", records


def test_a_file_is_fetched_once_verified_and_named_by_its_hash(store, tmp_path):
    url, mirror, records = store
    files = RemoteFiles(url, mirror, records, tmp_path / "shards", limit=10_000)
    before = fetched_bytes()
    path = files(mirror / "train/blocks/a.npy")
    assert path.read_bytes() == FILES["train/blocks/a.npy"]
    assert path.name == f"{records['train/blocks/a.npy']['xxh3']}-100.npy"
    assert fetched_bytes() - before == 100
    assert files(mirror / "train/blocks/a.npy") == path and fetched_bytes() - before == 100  # a hit


def test_a_file_changed_on_the_store_is_refused_and_nothing_is_kept(store, tmp_path):
    url, mirror, records = store
    fsspec.filesystem("memory").pipe_file(f"{url}/train/blocks/b.npy", b"B" * 100)  # same size, other bytes
    files = RemoteFiles(url, mirror, records, tmp_path / "shards", limit=10_000)
    with pytest.raises(DataError, match=r"train/blocks/b\.npy changed after it was published") as caught:
        files(mirror / "train/blocks/b.npy")
    assert "\n" not in str(caught.value)
    assert [p for p in (tmp_path / "shards").iterdir() if p.is_file()] == []  # no copy, no partial file


def test_the_least_recently_used_file_is_evicted_to_stay_within_the_limit(store, tmp_path):
    url, mirror, records = store
    files = RemoteFiles(url, mirror, records, tmp_path / "shards", limit=200)
    a = files(mirror / "train/blocks/a.npy")
    b = files(mirror / "train/blocks/b.npy")
    os.utime(b, ns=(1, 1))  # b older than a, whatever the clock's resolution
    os.utime(a, ns=(2, 2))
    c = files(mirror / "train/blocks/c.npy")
    assert a.exists() and c.exists() and not b.exists()
    assert sum(p.stat().st_size for p in (tmp_path / "shards").iterdir() if p.is_file()) <= 200


def test_a_file_not_in_the_manifest_is_refused(store, tmp_path):
    url, mirror, records = store
    files = RemoteFiles(url, mirror, records, tmp_path / "shards", limit=200)
    with pytest.raises(DataError, match="not listed in the manifest"):
        files(mirror / "train/blocks/z.npy")


@pytest.mark.parametrize(
    ("value", "limit"), [(None, shard_cache.DEFAULT_SHARD_CACHE_BYTES), ("1000", 1000), ("0", 0)]
)
def test_the_limit_comes_from_the_environment(monkeypatch, value, limit):
    if value is None:
        monkeypatch.delenv(shard_cache.SHARD_CACHE_ENV, raising=False)
    else:
        monkeypatch.setenv(shard_cache.SHARD_CACHE_ENV, value)
    assert shard_cache_limit() == limit


@pytest.mark.parametrize("value", ["-1", "10GB"])
def test_a_limit_that_is_no_number_of_bytes_is_refused(monkeypatch, value):
    monkeypatch.setenv(shard_cache.SHARD_CACHE_ENV, value)
    with pytest.raises(DataError, match=f"{shard_cache.SHARD_CACHE_ENV}="):
        shard_cache_limit()


def test_a_store_gone_mid_read_is_one_line_naming_the_object(tmp_path):
    """No server at the endpoint (gone mid-read): a DataError naming the object, no partial copy."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = "s3://bucket/prepared/key"
    data = FILES["train/blocks/a.npy"]
    records = {"train/blocks/a.npy": {"size": len(data), "xxh3": xxhash.xxh3_128_hexdigest(data)}}
    gone = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": "lightning-order-test-key",
        "secret": "lightning-order-test-secret",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    files = RemoteFiles(url, tmp_path / "mirror", records, tmp_path / "shards", gone, limit=10_000)
    with pytest.raises(
        DataError, match=rf"could not read {url}/train/blocks/a\.npy on object storage"
    ) as caught:
        files(tmp_path / "mirror" / "train/blocks/a.npy")
    assert "\n" not in str(caught.value) and "lightning-order-test-secret" not in str(caught.value)
    assert [p for p in (tmp_path / "shards").iterdir() if p.is_file()] == []


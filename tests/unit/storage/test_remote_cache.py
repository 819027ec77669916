"""Publishing to object storage (:mod:`lightning_order.data.engine.remote_cache`): the commit, the lock object, a crash.

A staged folder made by hand (a few files and a manifest listing them) stands for a preparation,
so these run in a fraction of a second against the S3 API server.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest

from lightning_order.data.engine import remote_cache
from lightning_order.data.engine.remote_cache import RemoteCache
from lightning_order.data.engine.storage import file_records
from lightning_order.errors import DataError
from lightning_order.ledger import MANIFEST_NAME, StepLedger

KEY = "0123456789abcdef0123456789abcdef"


def _staged(root: Path) -> Path:
    folder = root / KEY
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "part.bin").write_bytes(b"x" * 64)
    (folder / "tokenizer.json").write_text("{}")
    ledger = StepLedger(info={"cache_key": KEY})
    ledger.info["files"] = file_records(folder)
    ledger.save(folder)
    return folder


def _cache(bucket: str) -> tuple[RemoteCache, fsspec.AbstractFileSystem]:
    return RemoteCache(f"s3://{bucket}/prepared", KEY), fsspec.filesystem("s3")


def test_published_files_then_the_manifest_and_no_lock_left(s3_bucket, tmp_path):
    cache, fs = _cache(s3_bucket)
    assert cache.problems() == [f"{MANIFEST_NAME}: missing"]
    fs.pipe_file(f"{cache.url}/train/leftover.bin", b"a crashed publish's")  # no manifest: not a cache
    cache.publish(lambda staging: _staged(tmp_path), required=("train", "tokenizer.json"))
    fs.invalidate_cache()
    names = sorted(p.split(f"{KEY}/", 1)[1] for p in fs.find(cache.url))
    assert names == [MANIFEST_NAME, "tokenizer.json", "train/part.bin"]  # the leftover was removed
    assert cache.problems(("train", "tokenizer.json")) == [] and not fs.exists(cache.lock_url)
    assert not (tmp_path / KEY).exists()  # the staged folder goes once published


def test_a_missing_or_resized_object_is_a_problem(s3_bucket, tmp_path):
    cache, fs = _cache(s3_bucket)
    cache.publish(lambda staging: _staged(tmp_path))
    fs.pipe_file(f"{cache.url}/train/part.bin", b"x" * 10)
    assert cache.problems() == ["train/part.bin: 10 bytes, expected 64"]
    fs.rm(f"{cache.url}/tokenizer.json")
    assert "tokenizer.json: missing" in cache.problems()


def _lock(fs, cache: RemoteCache, **holder) -> None:
    body = {"token": "t", "host": socket.gethostname(), "pid": 1, "expires": time.time() + 600, **holder}
    fs.pipe_file(cache.lock_url, json.dumps(body).encode())


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(
    "holder",
    [
        {"expires": 0.0, "host": "elsewhere"},  # its lease ran out
        {"pid": "dead"},  # a process of this machine that no longer exists
        {"pid": "self"},  # a failed attempt of this very process
    ],
)
def test_a_stale_lock_is_taken_over(s3_bucket, tmp_path, holder):
    cache, fs = _cache(s3_bucket)
    pid = {"dead": _dead_pid(), "self": __import__("os").getpid()}.get(
        holder.get("pid"), holder.get("pid", 1)
    )
    _lock(fs, cache, **{**holder, "pid": pid})
    cache.publish(lambda staging: _staged(tmp_path), lock_timeout=5)
    assert cache.problems() == [] and not fs.exists(cache.lock_url)


def test_a_live_holder_is_waited_for_and_named_at_the_timeout(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(remote_cache, "POLL_S", 0.05)
    cache, fs = _cache(s3_bucket)
    _lock(fs, cache, host="node-7", pid=4242, command="train.py fit")
    with pytest.raises(
        DataError, match=r"lock_timeout=0\.3.*process 4242 on node-7 \(train\.py fit\)"
    ) as caught:
        cache.publish(lambda staging: _staged(tmp_path), lock_timeout=0.3)
    assert "\n" not in str(caught.value)
    assert not fs.exists(f"{cache.url}/{MANIFEST_NAME}")


def test_a_manifest_committed_meanwhile_is_reused_not_overwritten(s3_bucket, tmp_path, monkeypatch):
    """The conditional write: a preparer whose manifest comes second (its lease was taken over) keeps the first."""
    cache, fs = _cache(s3_bucket)
    real = remote_cache.upload_file

    def another_commits_first(fs_, local, url) -> None:
        real(fs_, local, url)
        if not fs.exists(f"{cache.url}/{MANIFEST_NAME}"):
            fs.pipe_file(f"{cache.url}/{MANIFEST_NAME}", b"the first commit")

    monkeypatch.setattr(remote_cache, "upload_file", another_commits_first)
    cache.publish(lambda staging: _staged(tmp_path))
    assert fs.cat_file(f"{cache.url}/{MANIFEST_NAME}") == b"the first commit"


def test_the_server_stopped_mid_publish_then_a_rerun_completes(own_s3_server, tmp_path, monkeypatch):
    """One line naming the object, no manifest; after ``start()`` a rerun takes over the lock and publishes."""
    from s3_server import make_bucket

    bucket = make_bucket(own_s3_server.endpoint_url)
    fast = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}
    cache = RemoteCache(f"s3://{bucket}/prepared", KEY, fast)
    real = remote_cache.upload_file

    def stop_at_the_second(fs, local, url) -> None:
        if url.endswith("train/part.bin"):  # sorted: tokenizer.json went up first
            own_s3_server.stop()
        real(fs, local, url)

    monkeypatch.setattr(remote_cache, "upload_file", stop_at_the_second)
    monkeypatch.setattr(remote_cache, "_THREADS", 1)
    with pytest.raises(
        DataError, match=rf"could not write {cache.url}/train/part\.bin on object storage"
    ) as caught:
        cache.publish(lambda staging: _staged(tmp_path))
    assert "\n" not in str(caught.value) and "lightning-order-test-secret" not in str(caught.value)
    own_s3_server.start()
    fs = fsspec.filesystem("s3", **fast)
    fs.invalidate_cache()
    assert not fs.exists(f"{cache.url}/{MANIFEST_NAME}") and fs.exists(
        cache.lock_url
    )  # not committed; lock left
    monkeypatch.setattr(remote_cache, "upload_file", real)
    RemoteCache(f"s3://{bucket}/prepared", KEY, fast).publish(
        lambda staging: _staged(tmp_path), lock_timeout=5
    )
    assert cache.problems() == [] and not fs.exists(cache.lock_url)


def test_two_concurrent_preparers_one_prepares_and_publishes(s3_bucket, tmp_path, monkeypatch):
    """Two threads: one takes the lock object, builds and publishes; the other waits and reuses it."""
    monkeypatch.setattr(remote_cache, "POLL_S", 0.05)
    builds: list[int] = []
    started = threading.Event()

    def build(staging: Path) -> Path:
        builds.append(1)
        started.set()
        time.sleep(0.3)  # the other preparer arrives while this one works
        return _staged(tmp_path)

    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            RemoteCache(f"s3://{s3_bucket}/prepared", KEY).publish(build, lock_timeout=30)
        except BaseException as err:
            errors.append(err)

    first = threading.Thread(target=prepare)
    first.start()
    started.wait(30)
    second = threading.Thread(target=prepare)
    second.start()
    for thread in (first, second):
        thread.join(60)
    assert errors == [] and builds == [1]
    assert RemoteCache(f"s3://{s3_bucket}/prepared", KEY).problems() == []

"""Ray and the S3 server (issue #46 items 1 and 2 on Ray): the corpus read from it by Ray's workers,
and a Ray preparation published to it.

Ray's workers are processes of their own, started here (one local Ray for the module) with no AWS
variable set: they reach the server only through the ``storage_options`` each work item carries
(held in memory, never written), so the tests show the options reach every worker's read and upload.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import pytest
import s3fs
from helpers import quiet_trainer
from resumes import model
from s3_server import ACCESS_KEY, SECRET_KEY, make_bucket

ray = pytest.importorskip("ray")

from lightning_order import OrderedLMDataModule, OrderValidator  # noqa: E402
from lightning_order.data.engine import remote_cache  # noqa: E402
from lightning_order.data.lm import file_ranges  # noqa: E402
from lightning_order.data.lm.artefacts import read_blocks  # noqa: E402
from lightning_order.data.lm.corpus import stdlib_corpus  # noqa: E402

pytestmark = pytest.mark.slow

SMALL = {"vocab_size": 400, "block_size": 32, "num_partitions": 4}
_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")


@pytest.fixture(scope="module")
def local_ray(s3_server: str) -> Iterator[dict[str, str]]:
    """A local Ray of 2 CPUs, started with no AWS variable set; the server's ``storage_options``."""
    with pytest.MonkeyPatch.context() as patch:
        for name in _AWS:
            patch.delenv(name, raising=False)
        s3fs.S3FileSystem.clear_instance_cache()
        temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
        try:
            yield {"key": ACCESS_KEY, "secret": SECRET_KEY, "endpoint_url": s3_server}
        finally:
            ray.shutdown()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in stdlib_corpus(500)))
    return path


def test_ray_workers_read_their_ranges_from_the_server_with_the_storage_options(
    local_ray, s3_server, corpus, tmp_path, monkeypatch
):
    options = local_ray
    bucket = make_bucket(s3_server)
    fsspec.filesystem("s3", **options).put(str(corpus), f"{bucket}/docs.jsonl")
    local = OrderedLMDataModule(
        "json", data_files=str(corpus), cache_dir=str(tmp_path / "local"), num_proc=1, **SMALL
    )
    local.prepare_data()
    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 20_000)  # many ranges, spread over the workers
    remote = OrderedLMDataModule("json", data_files=f"s3://{bucket}/docs.jsonl", cache_dir=str(tmp_path / "s3"),
                                 engine="ray", storage_options=options, **SMALL)  # fmt: skip
    remote.prepare_data()
    assert remote.ledger.latest("load").stats["engine"] == "ray"
    for split in ("train", "val"):
        assert np.array_equal(
            np.asarray(read_blocks(remote.cache_path)[split]),
            np.asarray(read_blocks(local.cache_path)[split]),
        )


def test_a_ray_preparation_publishes_to_the_server_what_the_local_engine_does(
    local_ray, s3_server, corpus, tmp_path, monkeypatch
):
    """``engine="ray"`` with ``cache_dir="s3://..."``: the same key, files and per-file xxh3 as the local
    engine's publish; the work items upload their shards (the driver uploads the small files and the
    manifest); a reader on another machine (a fresh local cache) trains from it."""
    options = local_ray
    bucket = make_bucket(s3_server)
    kwargs = {"data_files": str(corpus), "storage_options": options, **SMALL}
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(tmp_path / "publisher"))
    local = OrderedLMDataModule("json", cache_dir=f"s3://{bucket}/local", num_proc=1, **kwargs)
    local.prepare_data()
    on_ray = OrderedLMDataModule("json", cache_dir=f"s3://{bucket}/ray", engine="ray", **kwargs)
    assert on_ray.cache_key == local.cache_key
    uploads: list[
        int
    ] = []  # what this process (the driver) uploads; Ray's workers are processes of their own
    upload = remote_cache.upload_file
    monkeypatch.setattr(
        remote_cache,
        "upload_file",
        lambda fs, local, url: (uploads.append(local.stat().st_size), upload(fs, local, url)),
    )
    on_ray.prepare_data()
    driver = sum(uploads)
    fs = fsspec.filesystem("s3", **options)
    manifests = {
        name: json.loads(fs.cat_file(f"{bucket}/{name}/{local.cache_key}/manifest.json"))
        for name in ("local", "ray")
    }
    assert manifests["ray"]["info"]["files"] == manifests["local"]["info"]["files"]
    assert manifests["ray"]["info"]["cache_key"] == local.cache_key
    assert [r["stats"].get("engine") for r in manifests["ray"]["records"] if r["step"] == "load"] == ["ray"]
    files = manifests["ray"]["info"]["files"]
    total = sum(int(r["size"]) for r in files.values())
    large = sum(
        int(r["size"])
        for n, r in files.items()
        if (n.endswith(".npy") and "/blocks/" in n) or "/documents/" in n
    )
    print(f"ray publish: the driver uploaded {driver} of {total} bytes (block shards and documents: {large})")
    assert driver <= total - large  # the work items uploaded the block shards and the documents
    assert not fs.exists(f"{bucket}/ray/{local.cache_key}.lock")

    # Another machine: a fresh local cache, the store named by the same cache_dir.
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(tmp_path / "another-machine"))
    reader = OrderedLMDataModule("json", cache_dir=f"s3://{bucket}/ray", batch_size=4, **kwargs)
    validator = OrderValidator()
    quiet_trainer(tmp_path, [validator], max_steps=3, limit_val_batches=1).fit(model("lm", reader), reader)
    assert validator.violations == [] and reader.ledger.latest("train") is not None
    assert not (tmp_path / "another-machine" / "staging").exists()  # read, never prepared there

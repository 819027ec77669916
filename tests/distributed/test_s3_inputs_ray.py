"""The corpus read from the S3 server by Ray's workers (issue #46 item 1 on Ray): the same data as a local copy.

Ray's workers are processes of their own, started here after the AWS variables are removed: they
reach the server only through the ``storage_options`` each work item carries (held in memory,
never written), so the test shows the options reach every worker's read.
"""

from __future__ import annotations

import json
import tempfile

import fsspec
import numpy as np
import pytest
import s3fs
from s3_server import ACCESS_KEY, SECRET_KEY

ray = pytest.importorskip("ray")

from lightning_order import OrderedLMDataModule  # noqa: E402
from lightning_order.data.lm import file_ranges  # noqa: E402
from lightning_order.data.lm.artefacts import read_blocks  # noqa: E402
from lightning_order.data.lm.corpus import stdlib_corpus  # noqa: E402

SMALL = {"vocab_size": 400, "block_size": 32, "num_partitions": 4}


@pytest.mark.slow
def test_ray_workers_read_their_ranges_from_the_server_with_the_storage_options(
    s3_server, s3_bucket, tmp_path, monkeypatch
):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in stdlib_corpus(500)))
    fsspec.filesystem("s3").put(str(path), f"{s3_bucket}/docs.jsonl")
    local = OrderedLMDataModule(
        "json", data_files=str(path), cache_dir=str(tmp_path / "local"), num_proc=1, **SMALL
    )
    local.prepare_data()
    options = {"key": ACCESS_KEY, "secret": SECRET_KEY, "endpoint_url": s3_server}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    s3fs.S3FileSystem.clear_instance_cache()
    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 20_000)  # many ranges, spread over the workers
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        remote = OrderedLMDataModule("json", data_files=f"s3://{s3_bucket}/docs.jsonl", cache_dir=str(tmp_path / "s3"),
                                     engine="ray", storage_options=options, **SMALL)  # fmt: skip
        remote.prepare_data()
    finally:
        ray.shutdown()
    assert remote.ledger.latest("load").stats["engine"] == "ray"
    for split in ("train", "val"):
        assert np.array_equal(
            np.asarray(read_blocks(remote.cache_path)[split]),
            np.asarray(read_blocks(local.cache_path)[split]),
        )

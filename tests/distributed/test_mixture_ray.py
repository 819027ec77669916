"""A weighted mixture prepared with ``engine="ray"`` is the data ``num_proc=1`` prepares (issue #34, item 5).

Ray is started locally (its own short temp folder, shut down after), as in test_lm_ray.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from mixtures import mixture_dm, source_shares, write_sources  # noqa: E402

from lightning_order.data.lm.artefacts import read_blocks  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    yield
    ray.shutdown()


def test_ray_prepares_the_mixture_num_proc_1_prepares(tmp_path: Path, local_ray: None) -> None:
    write_sources(tmp_path / "data", twin=True)
    local = mixture_dm(tmp_path / "data", tmp_path / "local", num_partitions=4)
    remote = mixture_dm(tmp_path / "data", tmp_path / "ray", num_partitions=4, engine="ray")
    for dm in (local, remote):
        dm.setup("fit")
    assert remote.ledger.latest("load").stats["engine"] == "ray"
    assert remote.cache_key == local.cache_key and remote.data_fingerprints() == local.data_fingerprints()
    for split in ("train", "val"):
        assert np.array_equal(
            np.asarray(read_blocks(remote.cache_path)[split]),
            np.asarray(read_blocks(local.cache_path)[split]),
        )
    assert remote.ledger.latest("pack").stats["mixture"] == local.ledger.latest("pack").stats["mixture"]
    assert np.array_equal(remote.blocks("train"), local.blocks("train"))
    shares = source_shares(remote, remote.blocks("train"))
    assert abs(shares["web"] - 0.7) <= 0.01 and abs(shares["code"] - 0.3) <= 0.01

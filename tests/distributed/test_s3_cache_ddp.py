"""#46 item 3 under DDP: 2 CPU ranks (gloo) train one epoch from a cache published to an S3 API
server and read exactly the batches they read from a local cache (one launch of
tests/distributed/ddp_scripts/s3_cache_ddp.py; the ranks reach the server through the AWS
variables the ``s3_bucket`` fixture set)."""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


def test_two_ranks_read_the_local_cache_batches_from_the_server(s3_bucket, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(
        "LIGHTNING_ORDER_CACHE", str(tmp_path / "user-cache")
    )  # both ranks share one local cache
    url = f"s3://{s3_bucket}/prepared"
    run_script("s3_cache_ddp.py", tmp_path / "out", str(tmp_path / "local"), url, timeout=300)
    ranks = [read_json(tmp_path / "out" / f"rank{r}.json") for r in range(2)]
    for rank, result in enumerate(ranks):
        assert result["s3"]["rank"] == rank
        assert result["s3"]["batches"] == result["local"]["batches"] and result["s3"]["batches"]
        assert result["s3"]["violations"] == result["local"]["violations"] == []
    fetched = sum(result["s3"]["fetched"] for result in ranks)
    served = sum(result["s3"]["served"] for result in ranks)
    print(
        f"2 ranks, one machine: fetched {fetched} bytes for {served} served: {fetched / served:.3f} "
        f"(block shards published: {ranks[0]['s3']['published']})"
    )
    assert 0 < fetched <= 1.1 * served

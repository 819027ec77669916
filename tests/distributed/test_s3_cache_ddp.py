"""#46 item 3 under DDP: 2 CPU ranks (gloo) train one epoch from a cache published to an S3 API
server and read exactly the batches they read from a local cache; the run, checkpointed to the
server, resumed mid-epoch from there reads the rest of those batches on each rank (one launch of
tests/distributed/ddp_scripts/s3_cache_ddp.py for both tests; the ranks reach the server through
the AWS variables set here, as a user's would)."""

from __future__ import annotations

from typing import Any

import pytest
from ddp_utils import read_json, run_script
from s3_server import make_bucket, s3_env

pytestmark = pytest.mark.slow

#: s3_cache_ddp.py's EVERY: the s3 run is checkpointed every this many steps, resumed from the first.
EVERY = 360


@pytest.fixture(scope="module")
def launched(s3_server: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """One launch: the local run, the run from the server (checkpointed there), its mid-epoch resume."""
    tmp = tmp_path_factory.mktemp("s3-ddp")
    with pytest.MonkeyPatch.context() as patch:
        s3_env(patch, s3_server)
        patch.setenv("LIGHTNING_ORDER_CACHE", str(tmp / "user-cache"))  # both ranks share one local cache
        bucket = make_bucket(s3_server)
        url, runs = f"s3://{bucket}/prepared", f"s3://{bucket}/runs"
        run_script("s3_cache_ddp.py", tmp / "out", str(tmp / "local"), url, runs, timeout=300)
    return [read_json(tmp / "out" / f"rank{r}.json") for r in range(2)]


def test_two_ranks_read_the_local_cache_batches_from_the_server(launched: list[dict[str, Any]]) -> None:
    for rank, result in enumerate(launched):
        assert result["s3"]["rank"] == rank
        assert result["s3"]["batches"] == result["local"]["batches"] and result["s3"]["batches"]
        assert result["s3"]["violations"] == result["local"]["violations"] == []
    fetched = sum(result["s3"]["fetched"] for result in launched)
    served = sum(result["s3"]["served"] for result in launched)
    print(
        f"2 ranks, one machine: fetched {fetched} bytes for {served} served: {fetched / served:.3f} "
        f"(block shards published: {launched[0]['s3']['published']})"
    )
    assert 0 < fetched <= 1.1 * served


def test_two_ranks_resumed_mid_epoch_from_the_server_read_the_uninterrupted_batches(
    launched: list[dict[str, Any]],
) -> None:
    """Cache and checkpoints on the server: each rank of the resumed run reads the uninterrupted run's
    batches from the step it stopped at; the validator's resume proofs ran and found nothing."""
    for rank, result in enumerate(launched):
        assert len(result["s3"]["batches"]) > EVERY + 1, rank  # the checkpoint is mid-epoch (381 steps)
        assert result["resumed"]["batches"] == result["s3"]["batches"][EVERY:], rank
        assert result["resumed"]["violations"] == [], rank
        assert result["resumed"]["resumed_at"]["global_step"] == EVERY, rank
    # A fresh local cache, shared by the ranks of the machine: one of them fetched from the server.
    assert sum(result["resumed"]["fetched"] for result in launched) > 0

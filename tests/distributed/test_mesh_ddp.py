"""ModelParallelStrategy on 2 CPU ranks (gloo): the data is split by the data-parallel rank only (issue #36).

All cases in one launch of tests/distributed/ddp_scripts/mesh_ddp.py (the planted error last):
dp 1 × tp 2 (one tensor-parallel group reads identical batches), dp 2 × tp 1 (disjoint shares of
the epoch), a hand-written datamodule (no glue) sharding by the data-parallel rank and by the
global rank, and dp 1 × tp 2 with the DataModule sharding by the global rank (both errors stopped
before step 1, the violation naming the tensor-parallel group).
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> list[dict]:
    """What each rank wrote, a key per case."""
    out = tmp_path_factory.mktemp("mesh_ddp")
    run_script("mesh_ddp.py", out, str(out / "cache"), timeout=400)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _case(launch: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(launch):
        assert case in result, f"rank {rank} did not reach case {case!r}: {result}"
    return [result[case] for result in launch]


def test_one_tensor_parallel_group_reads_identical_batches_and_the_validator_is_silent(launch) -> None:
    ranks = _case(launch, "dp1xtp2")
    assert all("error" not in r and r["violations"] == [] and r["global_step"] == 3 for r in ranks), ranks
    assert [r["shard_info"]["rank"] for r in ranks] == [0, 0]
    assert [r["shard_info"]["world_size"] for r in ranks] == [1, 1]
    assert len(ranks[0]["batch_hashes"]) == 3
    assert ranks[0]["batch_hashes"] == ranks[1]["batch_hashes"]
    assert ranks[0]["block_hashes"] == ranks[1]["block_hashes"]


def test_two_data_parallel_ranks_read_disjoint_shares_and_the_validator_is_silent(launch) -> None:
    ranks = _case(launch, "dp2xtp1")
    assert all("error" not in r and r["violations"] == [] and r["global_step"] == 3 for r in ranks), ranks
    assert [r["shard_info"]["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["shard_info"]["length"] == ranks[1]["shard_info"]["length"] > 0
    assert not set(ranks[0]["batch_hashes"]) & set(ranks[1]["batch_hashes"])
    assert ranks[0]["block_hashes"] != ranks[1]["block_hashes"]


def test_sharding_by_the_global_rank_inside_a_tensor_parallel_group_stops_both_ranks(launch) -> None:
    ranks = _case(launch, "dp1xtp2-global-rank")
    for rank, result in enumerate(ranks):
        assert result["rank"] == rank and result["error"] == "OrderError", result
        assert result["rules"] == ["rank-mismatch"]
        assert result["global_step"] == 0 and result["batch_hashes"] == []
        (violation,) = result["violations"]
        assert violation["dimension"] == "tensor_parallel"
        assert "ranks 0, 1 form one tensor-parallel group (data-parallel rank 0)" in violation["message"]
        assert "distributed_sampler_kwargs" in result["message"]


def test_a_hand_written_datamodule_sharding_by_the_data_parallel_rank_is_silent_in_a_tensor_parallel_group(
    launch,
) -> None:
    ranks = _case(launch, "plain-dp1xtp2")
    assert all("error" not in r and r["violations"] == [] and r["global_step"] == 3 for r in ranks), ranks
    assert ranks[0]["batch_hashes"] == ranks[1]["batch_hashes"]


def test_a_hand_written_datamodule_sharding_by_the_global_rank_is_stopped_naming_the_group(launch) -> None:
    ranks = _case(launch, "plain-dp1xtp2-global-rank")
    for rank, result in enumerate(ranks):
        assert result["rank"] == rank and result["error"] == "OrderError", result
        assert result["global_step"] == 0
        (violation,) = result["violations"]
        assert violation["rule"] == "rank-mismatch" and violation["dimension"] == "tensor_parallel"
        assert "ranks 0, 1 form one tensor-parallel group (data-parallel rank 0)" in violation["message"]
        assert "hold different train sets" in violation["message"]

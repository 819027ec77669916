"""Two DDP ranks on CPU (gloo): equal block counts, disjoint parts of the blocks, one tokenizer; a per-rank tokenizer is stopped.

Both cases in one launch of tests/distributed/ddp_scripts/lm_ddp.py (the correct run first).
"""

from __future__ import annotations

from collections import Counter

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> list[dict]:
    """What each rank wrote, a key per case: ``default``, ``tokenizer-per-rank``."""
    out = tmp_path_factory.mktemp("lm_ddp")
    run_script("lm_ddp.py", out, str(out / "cache"), timeout=400)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _case(launch: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(launch):
        assert case in result, f"rank {rank} did not reach case {case!r}: {result}"
    return [result[case] for result in launch]


def test_two_ranks_hold_equal_disjoint_blocks_and_one_tokenizer(launch: list[dict]) -> None:
    ranks = _case(launch, "default")
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all("error" not in r and r["violations"] == [] and r["global_step"] == 4 for r in ranks)
    counts = [r["shard_info"]["length"] for r in ranks]
    assert counts[0] == counts[1] == len(ranks[0]["block_hashes"]) == len(ranks[1]["block_hashes"]) > 0
    assert ranks[0]["batches"] == ranks[1]["batches"]
    # Disjoint parts of one block file (blocks may repeat in content): no block more often than the split.
    together = Counter(ranks[0]["block_hashes"]) + Counter(ranks[1]["block_hashes"])
    assert not together - Counter(ranks[0]["split_block_hashes"])
    fps = [r["fingerprints"] for r in ranks]
    assert fps[0] == fps[1] and fps[0]["tokenizer"] == fps[0]["vocab"]


def test_a_tokenizer_that_differs_by_rank_stops_both_ranks_before_step_1(launch: list[dict]) -> None:
    ranks = _case(launch, "tokenizer-per-rank")
    for rank, result in enumerate(ranks):
        assert result["rank"] == rank
        assert result["error"] == "OrderError", result
        assert "rank-mismatch" in result["rules"]
        assert result["global_step"] == 0 and result["batches"] == 0
    assert ranks[0]["fingerprints"]["tokenizer"] != ranks[1]["fingerprints"]["tokenizer"]

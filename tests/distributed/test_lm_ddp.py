"""Two DDP ranks on CPU (gloo): equal block counts, disjoint parts of the blocks, one tokenizer; a per-rank tokenizer is stopped."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


def test_two_ranks_hold_equal_disjoint_blocks_and_one_tokenizer(tmp_path: Path) -> None:
    run_script("lm_ddp.py", tmp_path, str(tmp_path / "cache"))
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in range(2)]
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


def test_a_tokenizer_that_differs_by_rank_stops_both_ranks_before_step_1(tmp_path: Path) -> None:
    run_script("lm_ddp.py", tmp_path, str(tmp_path / "cache"), "tokenizer-per-rank", timeout=240)
    for rank in range(2):
        result = read_json(tmp_path / f"rank{rank}.json")
        assert result["error"] == "OrderError", result
        assert "rank-mismatch" in result["rules"]
        assert result["global_step"] == 0 and result["batches"] == 0
    assert (
        read_json(tmp_path / "rank0.json")["fingerprints"]["tokenizer"]
        != read_json(tmp_path / "rank1.json")["fingerprints"]["tokenizer"]
    )

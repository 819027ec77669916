"""OrderValidator under real DDP (2 CPU ranks, gloo), each run in a subprocess (see tests/ddp_utils.py)."""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


def test_correct_ddp_run_raises_nothing_and_shards_are_equal(tmp_path):
    run_script("validator_ddp_correct.py", tmp_path)
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in range(2)]
    for rank, result in enumerate(ranks):
        assert result["rank"] == rank and result["global_step"] == 3
        assert result["order_warnings"] == []
        assert result["ledger_violations"] == []
        assert result["shard_info"]["world_size"] == 2 and result["shard_info"]["rank"] == rank
        steps = result["ledger_steps"]
        # fit records the model and loop steps; the validate call after it one more evaluate.
        assert steps[steps.index("init_model") :] == [
            "init_model",
            "configure_optimizers",
            "train",
            "evaluate",
            "evaluate",
        ]
    assert ranks[0]["shard_info"]["length"] == ranks[1]["shard_info"]["length"]
    assert ranks[0]["fingerprints"] == ranks[1]["fingerprints"] != {}


@pytest.mark.parametrize(
    ("case", "rules"),
    [("per-shard", {"rank-mismatch", "shard-before-normalize"}), ("unequal", {"rank-mismatch"})],
)
def test_rank_errors_raise_on_every_rank_without_a_hang(tmp_path, case, rules):
    run_script("validator_ddp_wrong.py", tmp_path, case, timeout=240)
    for rank in range(2):
        result = read_json(tmp_path / f"rank{rank}.json")
        assert result["error"] == "OrderError", result
        assert rules <= set(result["rules"]), result["rules"]
        assert result["global_step"] == 0 and result["batches"] == 0
    if case == "unequal":
        assert "unequal lengths" in read_json(tmp_path / "rank0.json")["message"]
    else:
        message = read_json(tmp_path / "rank1.json")["message"]
        assert "fitted feature statistics" in message and "is normalised with mean" in message

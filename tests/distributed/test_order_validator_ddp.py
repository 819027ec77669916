"""OrderValidator under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/validator_ddp.py (a subprocess, see tests/ddp_utils.py): the correct
pipeline first, then the rank-level errors, each caught on every rank."""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each rank wrote, a key per case: ``correct``, ``per-shard``, ``unequal``."""
    out = tmp_path_factory.mktemp("validator_ddp")
    run_script("validator_ddp.py", out, timeout=400)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def test_correct_ddp_run_raises_nothing_and_shards_are_equal(ranks):
    correct = [result["correct"] for result in ranks]
    for rank, result in enumerate(correct):
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
    assert correct[0]["shard_info"]["length"] == correct[1]["shard_info"]["length"]
    assert correct[0]["fingerprints"] == correct[1]["fingerprints"] != {}


@pytest.mark.parametrize(
    ("case", "rules"),
    [("per-shard", {"rank-mismatch", "shard-before-normalize"}), ("unequal", {"rank-mismatch"})],
)
def test_rank_errors_raise_on_every_rank_without_a_hang(ranks, case, rules):
    for rank in range(2):
        result = ranks[rank].get(case)
        assert result is not None, f"rank {rank} did not reach case {case!r}: {ranks[rank]}"
        assert result["rank"] == rank
        assert result["error"] == "OrderError", result
        assert rules <= set(result["rules"]), result["rules"]
        assert result["global_step"] == 0 and result["batches"] == 0
    if case == "unequal":
        assert "unequal lengths" in ranks[0][case]["message"]
    else:
        message = ranks[1][case]["message"]
        assert "fitted feature statistics" in message and "is normalised with mean" in message

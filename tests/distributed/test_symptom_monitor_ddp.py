"""SymptomMonitor under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/monitor_ddp.py (a subprocess, tests/ddp_utils.py): per-rank
statistics diverge and every rank stops alike; a correct hand-written pipeline with a capped
vocabulary gives no diagnosis."""

from __future__ import annotations

import pytest
import torch
from ddp_utils import read_json, run_script

from lightning_order.ledger import CHECKPOINT_KEY as PAUSE_KEY


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> list[dict]:
    """What each rank wrote, a key per case: ``shuffled``, ``handwritten``, ``per-shard``."""
    out = tmp_path_factory.mktemp("monitor_ddp")
    run_script("monitor_ddp.py", out, timeout=500)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _case(launch: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(launch):
        assert case in result, f"rank {rank} did not reach case {case!r}: {result}"
        assert result[case]["rank"] == rank
    return [result[case] for result in launch]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "expected"), [("per-shard", "rank-divergence"), ("shuffled", None)])
def test_per_rank_statistics_diverge_and_stop_all_ranks_under_ddp(
    launch: list[dict], mode: str, expected: str | None
) -> None:
    ranks = _case(launch, mode)
    assert all(r["world_size"] == 2 for r in ranks)
    for result in ranks:
        codes = [d["symptom"] for d in result["diagnoses"]]
        if expected is None:
            assert codes == []
        else:
            assert expected in codes
            diagnosis = next(d for d in result["diagnoses"] if d["symptom"] == expected)
            assert diagnosis["suspected_rule"] == "shard-before-normalize"
            assert diagnosis["evidence"]["paired"] and diagnosis["evidence"]["z_score"] > 5
    # Every rank took the same decisions, and stopped at the same step.
    assert [d["symptom"] for d in ranks[0]["diagnoses"]] == [d["symptom"] for d in ranks[1]["diagnoses"]]
    assert ranks[0]["global_step"] == ranks[1]["global_step"]
    if expected is None:
        assert ranks[0]["global_step"] == 120 and ranks[0]["pause_path"] is None  # 2 epochs of 60 steps
    else:
        assert ranks[0]["global_step"] < 120  # paused
        checkpoint = torch.load(ranks[0]["pause_path"], weights_only=False)
        assert checkpoint["global_step"] == ranks[0]["global_step"] and checkpoint["optimizer_states"]
        waste = checkpoint[PAUSE_KEY]["waste"]
        assert waste["num_devices"] == 2 and waste["cost"] == pytest.approx(waste["device_hours"])
        assert [r["symptom"] for r in checkpoint[PAUSE_KEY]["reason"]] == [expected]


@pytest.mark.slow
def test_capped_word_level_vocabulary_is_no_order_error_under_ddp(launch: list[dict]) -> None:
    ranks = _case(launch, "handwritten")
    for result in ranks:
        assert result["world_size"] == 2 and result["global_step"] > 40
        assert result["unk_rate"] > 0.01
        assert result["diagnoses"] == [] and result["validator_rules"] == []

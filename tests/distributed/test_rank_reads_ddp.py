"""Ranks reading the same data, and a stateful stream read by the validator, on 2 CPU ranks (gloo).

All cases in one launch of tests/distributed/ddp_scripts/rank_reads_ddp.py (issue #37, items 6
and 9): each planted way of giving every rank the same samples stops both ranks before step 1
with ``ranks-read-same-data`` and the shares; the correct loaders, ``OrderedLMDataModule`` and a
tensor-parallel group reading one share are silent; the validator leaves a stateful stream where
it found it. Issue #43 item 4: loader workers that each read every shard stop both ranks with
``rows-served-twice``; workers split by ``get_worker_info()`` are silent.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> list[dict]:
    """What each rank wrote, a key per case."""
    out = tmp_path_factory.mktemp("rank_reads_ddp")
    run_script("rank_reads_ddp.py", out, str(out / "cache"), timeout=500)
    return [read_json(out / f"rank{r}.json") for r in range(2)]


def _case(launch: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(launch):
        assert case in result, f"rank {rank} did not reach case {case!r}: {result}"
    return [result[case] for result in launch]


@pytest.mark.parametrize(
    ("case", "evidence", "shares"),
    [
        ("sampler-seed-rank", "sampler", "read by more than one rank"),
        ("nanogpt-seed-rank", "sampler", "read by more than one rank"),
        ("all-data", "sampler", "100.0% of it is read by more than one rank and 0.0% is never read"),
        ("get-batch-same-seed", "batches", "identical first train batches"),
    ],
)
def test_ranks_reading_the_same_samples_are_stopped_before_step_1(launch, case, evidence, shares) -> None:
    for rank, result in enumerate(_case(launch, case)):
        assert result["rank"] == rank and result["error"] == "OrderError", result
        assert result["rules"] == ["ranks-read-same-data"] and result["global_step"] == 0, result
        assert result["batches"] == []
        (details,) = result["details"]
        assert details["evidence"] == evidence
        assert shares in result["messages"][0]
        assert "DistributedSampler" in result["message"]  # the fix


def test_distributed_sampler_seeded_by_rank_reports_the_shares_repeated_and_never_read(launch) -> None:
    (details,) = _case(launch, "sampler-seed-rank")[0]["details"]
    # Two independent halves of 256 rows: about a quarter read twice, a quarter never.
    assert 0.1 < details["repeated"] < 0.4 and 0.1 < details["never_read"] < 0.4
    assert details["repeated"] == pytest.approx(details["never_read"])


@pytest.mark.parametrize(
    "case",
    [
        "lightning-sampler",
        "sampler-same-seed",
        "get-batch-seed-rank",
        "ordered-lm",
        "nanogpt",
        "tp-group-all-data",
        "workers-split",
    ],
)
def test_correct_loaders_are_silent(launch, case) -> None:
    ranks = _case(launch, case)
    for result in ranks:
        assert "error" not in result and result["rules"] == [] and result["global_step"] == 2, result
    if case == "tp-group-all-data":  # one tensor-parallel group: the same batches by design
        assert ranks[0]["batches"] == ranks[1]["batches"]
    else:
        assert ranks[0]["batches"] != ranks[1]["batches"]


def test_a_stateful_stream_trains_the_same_batches_and_all_its_steps_with_the_validator(launch) -> None:
    with_validator, without = _case(launch, "stream-with"), _case(launch, "stream-without")
    for rank in range(2):
        assert "error" not in with_validator[rank], with_validator[rank]
        assert with_validator[rank]["rules"] == []
        assert with_validator[rank]["batches"] == without[rank]["batches"]
        steps = with_validator[rank]["expected_steps"]
        assert steps > 2 and with_validator[rank]["global_step"] == without[rank]["global_step"] == steps
    assert with_validator[0]["batches"][0] != with_validator[1]["batches"][0]  # a share per rank


def test_loader_workers_that_each_read_every_shard_are_stopped_on_every_rank(launch) -> None:
    # #43 item 4: each rank's two workers read its whole share of the shards (llama2.c without
    # get_worker_info()); read on a copy of the real loader, agreed across ranks.
    for rank, result in enumerate(_case(launch, "workers-each-read-all")):
        assert result["rank"] == rank and result["error"] == "OrderError", result
        assert result["rules"] == ["rows-served-twice"], result
        assert result["global_step"] == 0 and result["batches"] == []
        assert result["details"][0]["proven"] is True and result["details"][0]["workers"] == 2

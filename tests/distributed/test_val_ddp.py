"""Validation shared out across 2 CPU ranks (gloo), reduced exactly: the 1-rank figures on any shares (issue #35).

One launch of tests/distributed/ddp_scripts/val_ddp.py on 2 ranks (``strategy="ddp"``, then
``ModelParallelStrategy`` dp 2 × tp 1 and dp 1 × tp 2), and one single-process run of it on the same
cache: the seeded model's ``validate`` and ``test`` figures, what each rank read. 97 validation
blocks: shares of 48 and 49, so a mean of rank means would not be the 1-rank value.
"""

from __future__ import annotations

from collections import Counter

import pytest
from ddp_utils import read_json, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launch(tmp_path_factory) -> tuple[list[dict], dict]:
    """What each of the 2 ranks wrote (a key per case), and the single process's figures."""
    out = tmp_path_factory.mktemp("val_ddp")
    cache = str(out / "cache")
    run_script("val_ddp.py", out, cache, timeout=400)
    run_script("val_ddp.py", out / "one", cache, "one", timeout=200, ranks=1)
    return [read_json(out / f"rank{r}.json") for r in range(2)], read_json(out / "one" / "one.json")


def _case(ranks: list[dict], case: str) -> list[dict]:
    for rank, result in enumerate(ranks):
        assert case in result, f"rank {rank} did not reach case {case!r}: {sorted(result)}"
    return [result[case] for result in ranks]


@pytest.mark.parametrize("case", ["ddp", "fsdp2"])
def test_two_data_parallel_ranks_read_disjoint_shares_that_make_the_whole_split(launch, case: str) -> None:
    ranks, one = _case(launch[0], case), launch[1]
    size = one["val_blocks"]
    assert size % 2 == 1 and one["sampler"] == list(range(size)) and one["padding"] == 0
    real = [[i for i in r["sampler"] if i != size] for r in ranks]
    assert not set(real[0]) & set(real[1]) and sorted(real[0] + real[1]) == list(range(size))
    assert sorted(map(len, real)) == [size // 2, size // 2 + 1]  # uneven shares, on purpose
    # As many steps on both ranks (a sharded model's forward is collective): the shorter share is
    # padded with one block that has no target, scored by nobody.
    assert ranks[0]["batches"] == ranks[1]["batches"] and sum(r["padding"] for r in ranks) == 1
    assert Counter(ranks[0]["row_hashes"]) + Counter(ranks[1]["row_hashes"]) == Counter(one["row_hashes"])
    assert {r["sampler_type"] for r in ranks} == {"ShareSampler"}


@pytest.mark.parametrize("case", ["ddp", "fsdp2", "tp"])
def test_the_logged_figures_on_two_ranks_are_the_one_rank_figures(launch, case: str) -> None:
    ranks, one = _case(launch[0], case), launch[1]
    for result in ranks:
        for name in ("val_loss", "val_ppl", "test_loss", "test_ppl"):
            assert result[name] == pytest.approx(one[name], rel=1e-6, abs=1e-6), (case, name)
        # The run summary prints the exact perplexity: the 1-rank line.
        assert result["summary"] == one["summary"] == f"validation perplexity: {one['val_ppl']:.2f}"


def test_the_exact_value_is_the_flat_token_mean_which_a_mean_of_rank_means_misses(launch) -> None:
    """Each rank's own float64 sum and count, merged: the flat mean; averaged per rank: off."""
    ranks, one = _case(launch[0], "ddp"), launch[1]
    total, tokens = sum(r["own_sum"] for r in ranks), sum(r["own_tokens"] for r in ranks)
    assert tokens == one["own_tokens"] and total / tokens == pytest.approx(one["own_sum"] / one["own_tokens"])
    assert ranks[0]["val_loss"] == pytest.approx(total / tokens, rel=1e-6)
    mean_of_means = sum(r["own_sum"] / r["own_tokens"] for r in ranks) / 2
    assert abs(mean_of_means - total / tokens) > 1e-6  # what sync_dist=True would have logged


def test_a_tensor_parallel_group_validates_on_one_share(launch) -> None:
    ranks, one = _case(launch[0], "tp"), launch[1]
    assert (
        ranks[0]["sampler"] == ranks[1]["sampler"] == one["sampler"]
    )  # one data-parallel rank: the whole split
    assert ranks[0]["row_hashes"] == ranks[1]["row_hashes"] == one["row_hashes"]


def test_a_fit_validating_on_shares_is_silent_and_runs_as_many_steps_on_each_rank(launch) -> None:
    ranks = _case(launch[0], "ddp-fit")
    for result in ranks:
        assert "error" not in result and result["violations"] == [], result
        assert result["global_step"] == 2 and result["val_loss"] > 0
    assert ranks[0]["batches"] == ranks[1]["batches"] > 0
    assert ranks[0]["val_loss"] == ranks[1]["val_loss"]

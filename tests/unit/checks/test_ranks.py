"""Rank checks on gathered per-rank summaries."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks import check_ranks

FPS = {"manifest": "m" * 32, "split": "s" * 32, "statistics": "t" * 32, "vocab": "v" * 32}


def summary(rank: int, **overrides) -> dict:
    return {"rank": rank, "fingerprints": dict(FPS), "shard_length": 500, **overrides}


def test_agreeing_ranks_and_a_single_rank_pass():
    assert check_ranks([summary(0), summary(1), summary(2)]) == []
    assert check_ranks([summary(0, shard_length=3)]) == []


@pytest.mark.parametrize(
    ("key", "word"),
    [("manifest", "manifest"), ("split", "split"), ("statistics", "statistics"), ("vocab", "vocabulary")],
)
def test_a_differing_fingerprint_is_rank_mismatch(key, word):
    other = summary(1, fingerprints={**FPS, key: "x" * 32})
    (violation,) = check_ranks([summary(0), other])
    assert violation.rule == "rank-mismatch" and word in violation.message
    assert violation.details["item"] == key and "rank 1: xxxxxxxxxxxx" in violation.message


def test_unequal_shard_lengths_are_reported_before_they_hang_ddp():
    (violation,) = check_ranks([summary(0, shard_length=500), summary(1, shard_length=499)])
    assert violation.rule == "rank-mismatch" and "hang" in violation.message


def _features(rank: int, rows: int, shift: float = 0.0, scale: float = 1.0, seed: int = 0) -> dict:
    x = np.random.default_rng(seed * 100 + rank).normal(shift, scale, size=(rows, 3))
    return summary(rank, feature_mean=x.mean(0).tolist(), feature_std=x.std(0).tolist(), feature_rows=rows)


@pytest.mark.parametrize("seed", range(20))
def test_sampling_noise_never_trips_the_feature_comparison(seed):
    assert check_ranks([_features(r, 512, seed=seed) for r in range(4)]) == []


@pytest.mark.parametrize(("shift", "scale"), [(1.0, 1.0), (0.0, 3.0)])
def test_a_rank_with_other_feature_statistics_is_rank_mismatch(shift, scale):
    (violation,) = check_ranks([_features(0, 512), _features(1, 512, shift=shift, scale=scale)])
    assert violation.rule == "rank-mismatch" and violation.details["item"] == "features"


def test_too_few_rows_or_no_features_skip_the_comparison():
    assert check_ranks([_features(0, 8), _features(1, 8, shift=5.0)]) == []
    assert check_ranks([summary(0, fingerprints={}), summary(1, fingerprints={})]) == []


def test_differing_statistics_name_the_feature_normalised_differently():
    names = ["ratio", "score", "amount"]
    a = summary(0, fitted_mean=[0.5, 1.0, 1000.0], feature_names=names)
    b = summary(
        1, fitted_mean=[0.5, 1.0, 9000.0], feature_names=names, fingerprints={**FPS, "statistics": "x"}
    )
    (violation,) = check_ranks([a, b])
    assert "'amount' is normalised with mean 1e+03 on rank 0, 9e+03 on rank 1" in violation.message


def _meshed(dp_size: int, tp_size: int, starts: list[int]) -> list[dict]:
    """One summary per rank of a dp_size x tp_size mesh (tensor-parallel ranks adjacent), with its share."""
    return [
        summary(r, data_parallel={"size": dp_size, "rank": r // tp_size}, shard_start=start)
        for r, start in enumerate(starts)
    ]


@pytest.mark.parametrize(
    ("dp", "tp", "starts"),
    [(1, 2, [0, 0]), (2, 1, [0, 8]), (2, 2, [0, 0, 8, 8]), (4, 1, [0, 8, 16, 24])],
)
def test_shares_that_follow_the_data_parallel_dimension_pass(dp, tp, starts):
    assert check_ranks(_meshed(dp, tp, starts)) == []


def test_ranks_of_one_tensor_parallel_group_reading_different_shares_is_rank_mismatch_naming_the_group():
    (violation,) = check_ranks(_meshed(2, 2, [0, 8, 16, 24]))  # sharded by the global rank
    assert violation.rule == "rank-mismatch" and violation.steps == ("shard",)
    assert violation.details["dimension"] == "tensor_parallel"
    assert "ranks 0, 1 form one tensor-parallel group (data-parallel rank 0)" in violation.message
    assert "rank 0: 0; rank 1: 8" in violation.message
    assert "distributed_sampler_kwargs" in violation.fix


def test_data_parallel_ranks_reading_the_same_share_is_rank_mismatch_naming_the_dimension():
    (violation,) = check_ranks(_meshed(2, 2, [0, 0, 0, 0]))  # every rank reads the whole first share
    assert violation.details["dimension"] == "data_parallel"
    assert "data-parallel ranks 0 and 1 (ranks 0 and 2) read the same share" in violation.message


def test_without_mesh_facts_every_rank_is_its_own_data_parallel_rank():
    assert check_ranks([summary(0, shard_start=0), summary(1, shard_start=8)]) == []
    (violation,) = check_ranks([summary(0, shard_start=0), summary(1, shard_start=0)])
    assert violation.details["dimension"] == "data_parallel"

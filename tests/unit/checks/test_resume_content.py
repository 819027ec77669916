"""``resume-data-changed`` from content samples (lightning_order/checks/resume_content.py)."""

from __future__ import annotations

import pytest

from lightning_order.checks.resume_content import SAMPLE_ITEMS, check_resume_content, sample_indices


def _sample(tokenizer="tok-a", train=(1, 2, 3), val=(7, 8), length=None, same=True, dp=(1, 0)) -> dict:
    return {
        "tokenizer": tokenizer,
        "splits": {
            "train": {"length": length or 1000, "hashes": list(train)},
            "val": {"length": 200, "hashes": list(val)},
        },
        "same_on_ranks": same,
        "data_parallel": {"size": dp[0], "rank": dp[1]},
    }


def test_sample_indices_are_fixed_by_the_length() -> None:
    assert sample_indices(10) == list(range(10))
    picked = sample_indices(100_000)
    assert len(picked) == SAMPLE_ITEMS and picked == sorted(picked) == sample_indices(100_000)


def test_the_same_content_is_silent() -> None:
    assert check_resume_content(_sample(), _sample()) == []


@pytest.mark.parametrize("stored", [None, {}])
def test_a_checkpoint_without_a_sample_proves_nothing_here(stored) -> None:
    assert check_resume_content(stored, _sample()) == []


def test_another_tokenizer_and_re_encoded_splits_name_what_changed() -> None:
    (violation,) = check_resume_content(_sample(), _sample("tok-b", train=(1, 5, 6), val=(9, 8)))
    assert violation.rule == "resume-data-changed" and violation.steps == ("build_vocab", "encode")
    assert violation.details["changed"] == ["tokenizer", "train", "val"]
    assert "the tokenizer changed (tok-a -> tok-b)" in violation.message
    assert "2 of 3 sampled train items differ" in violation.message
    assert "1 of 2 sampled val items differ" in violation.message
    assert "same tokenizer.json" in violation.fix


def test_a_split_of_another_length_is_named() -> None:
    (violation,) = check_resume_content(_sample(), _sample(length=990))
    assert violation.details["changed"] == ["train"] and violation.steps == ("encode",)
    assert "the train split holds 990 items, 1000 before" in violation.message


def test_a_shard_per_rank_is_compared_only_by_the_saving_ranks_position() -> None:
    stored = _sample(same=False, dp=(2, 0))
    other_shard = _sample(train=(4, 5, 6), val=(1, 2), same=False, dp=(2, 1))
    assert check_resume_content(stored, other_shard) == []  # rank 1 holds another shard by design
    (violation,) = check_resume_content(stored, _sample(train=(4, 5, 6), same=False, dp=(2, 0)))
    assert violation.details["changed"] == ["train"]
    # Another data-parallel size: the shards are cut anew, only the tokenizer compares.
    assert check_resume_content(stored, _sample(train=(9,), same=False, dp=(1, 0))) == []
    (tokenizer,) = check_resume_content(stored, _sample("tok-b", train=(9,), same=False, dp=(1, 0)))
    assert tokenizer.details["changed"] == ["tokenizer"]


def test_hashes_of_another_item_hash_scheme_are_not_compared_but_lengths_are() -> None:
    # #48 changed how an item of arrays is hashed (alike alone or in a chunk): a checkpoint saved
    # before holds hashes of the old scheme, which differ for the very same data.
    now = {**_sample(train=(4, 5, 6), val=(1, 1)), "item_hashes": 2}
    assert check_resume_content(_sample(), now) == []
    (violation,) = check_resume_content(_sample(length=990), now)
    assert "990" in violation.message
    assert check_resume_content({**_sample(), "item_hashes": 2}, now) != []  # one scheme: compared

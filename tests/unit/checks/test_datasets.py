"""checks.datasets: rank and overlap judgements from plain dataset summaries (no Trainer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_order.callbacks.validator.content import item_hashes, summarize_splits
from lightning_order.checks import check_rank_datasets, check_twin_rate


def _split(ids, floats=None, whole=True, length=None):
    ids = [int(i) for i in ids]
    return {
        "length": length if length is not None else len(ids),
        "whole": whole,
        "ids": ids,
        "inputs": ids,
        "floats": floats or {},
        "random": False,
    }


def _float(mean, std=(1.0,), rows=200):
    return {"numeric": {"mean": list(mean), "std": list(std), "rows": rows}}


def test_identical_datasets_on_every_rank_pass():
    part = _split(range(100), _float([0.1]))
    assert check_rank_datasets([{"rank": r, "train": part, "val": part} for r in range(2)]) == []


def test_one_rank_alone_is_never_judged():
    assert check_rank_datasets([{"rank": 0, "train": _split(range(3)), "val": _split(range(3))}]) == []


@pytest.mark.parametrize("shared", [0, 40])
def test_validation_sets_that_differ_are_a_rank_mismatch_naming_the_ranks(shared):
    val0, val1 = _split(range(100)), _split(range(100 - shared, 200 - shared))
    (v,) = check_rank_datasets([{"rank": 0, "val": val0}, {"rank": 1, "val": val1}])
    assert v.rule == "rank-mismatch" and "ranks 0 and 1 hold different validation sets" in v.message
    assert "generator=torch.Generator().manual_seed(42)" in v.fix
    assert ("share 40%" in v.message) == bool(shared)


def test_disjoint_train_shards_pass_and_overlapping_ones_do_not():
    val = _split(range(1000, 1100))
    disjoint = [{"rank": r, "train": _split(range(r * 100, r * 100 + 100)), "val": val} for r in range(2)]
    assert check_rank_datasets(disjoint) == []
    overlapping = [{"rank": r, "train": _split(range(r * 50, r * 50 + 100)), "val": val} for r in range(2)]
    (v,) = check_rank_datasets(overlapping)
    assert v.rule == "rank-mismatch" and "train sets that share 50%" in v.message


def test_same_rows_with_different_floats_is_shard_before_normalize_for_any_key():
    a = _split(range(100), {"numeric": {"mean": [0.0, 0.5], "std": [1.0, 1.0], "rows": 100}})
    b = _split(range(100), {"numeric": {"mean": [0.0, 0.52], "std": [1.0, 1.0], "rows": 100}})
    (v,) = check_rank_datasets([{"rank": 0, "val": a, "train": a}, {"rank": 1, "val": b, "train": b}])
    assert v.rule == "shard-before-normalize" and "'numeric'" in v.message and "column 1" in v.message


def test_disjoint_shards_with_shifted_distributions_are_a_rank_mismatch():
    val = _split(range(1000, 1100))
    parts = [
        _split(range(0, 500), _float([0.0], rows=500)),
        _split(range(500, 1000), _float([3.0], rows=500)),
    ]
    (v,) = check_rank_datasets([{"rank": r, "train": p, "val": val} for r, p in enumerate(parts)])
    assert v.rule == "rank-mismatch" and "numeric[0]" in v.message


def test_models_of_different_sizes_per_rank_are_a_rank_mismatch():
    (v,) = check_rank_datasets(
        [{"rank": 0, "model": {"embedding_rows": 402}}, {"rank": 1, "model": {"embedding_rows": 398}}]
    )
    assert v.rule == "rank-mismatch" and "rank 0: 402; rank 1: 398" in v.message


def test_random_datasets_are_not_compared():
    a, b = _split(range(10)), _split(range(10, 20))
    a["random"] = True
    assert check_rank_datasets([{"rank": 0, "val": a}, {"rank": 1, "val": b}]) == []


def test_twin_rate_reported_whatever_train_repeats_against_the_threshold():
    train = np.array([1, 1, 1, 2, 2, 3] * 50)  # repeats by nature
    (v,) = check_twin_rate(train, np.arange(3, 103), threshold=0.005)
    assert v.rule == "train-val-overlap" and v.details["twins"] == 1 and v.details["rate"] == 0.01
    assert "1.0%" in v.message and "threshold of 0.5%" in v.message
    assert check_twin_rate(train, np.arange(3, 103), threshold=0.01) == []
    assert check_twin_rate(train, np.arange(10, 110)) == []


def test_twin_rate_is_scaled_by_the_share_of_train_rows_hashed():
    (v,) = check_twin_rate(np.arange(100), np.arange(95, 195), train_rows=1000, threshold=0.01)
    assert v.details["rate"] == pytest.approx(0.5) and "estimated from 10%" in v.message


def test_item_hashes_separate_rows_from_inputs():
    item = {"input_ids": torch.tensor([5, 9, 2]), "numeric": torch.tensor([0.5]), "labels": torch.tensor(1)}
    renormalised = {**item, "numeric": torch.tensor([0.7])}
    relabelled = {**item, "labels": torch.tensor(0)}
    rows, inputs, max_id = item_hashes(item)
    assert max_id == 9
    assert item_hashes(renormalised)[0] == rows and item_hashes(renormalised)[1] != inputs
    assert item_hashes(relabelled)[0] != rows and item_hashes(relabelled)[1] == inputs
    assert item_hashes((torch.tensor([1.0, 2.0]), 1))[0] is None  # floats and a label only
    assert item_hashes(("some text", 1))[0] is not None


def test_summaries_hash_whole_small_splits_and_sample_the_same_indices_in_large_ones():
    class DM:
        def __init__(self, n):
            self.rows = [
                {
                    "input_ids": torch.tensor([i % 50, 7]),
                    "numeric": torch.tensor([float(i)]),
                    "labels": torch.tensor(0),
                }
                for i in range(n)
            ]

        def train_dataloader(self):
            return torch.utils.data.DataLoader(self.rows, batch_size=4)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(self.rows[:10], batch_size=4)

    small = summarize_splits(DM(100), {"train": 100, "val": 10}, sample_rows=16, whole_rows=1000)
    assert small["train"]["whole"] and len(small["train"]["inputs"]) == 100
    assert small["train"]["max_token_id"] == 49 and small["train"]["floats"]["numeric"]["rows"] == 16
    large = [
        summarize_splits(DM(n), {"train": 300, "val": 10}, sample_rows=16, whole_rows=50) for n in (300, 400)
    ]
    assert not large[0]["train"]["whole"] and large[0]["train"]["ids"] == large[1]["train"]["ids"]


def test_stacked_items_hash_by_row_like_single_items():
    from lightning_order.callbacks.validator.content import hash_items

    item = {"input_ids": torch.tensor([5, 9, 2]), "numeric": torch.tensor([0.5]), "labels": torch.tensor(1)}
    items = [item, {**item, "numeric": torch.tensor([0.7])}, {**item, "labels": torch.tensor(0)}, dict(item)]
    (r0, i0, m0), (r1, i1, _), (r2, i2, _), (r3, i3, _) = hash_items(items)
    assert m0 == 9 and (r3, i3) == (r0, i0)
    assert r1 == r0 and i1 != i0  # renormalised: the same row, another input
    assert r2 != r0 and i2 == i0  # relabelled: another row, the same input
    ragged = hash_items([{"input_ids": [1, 2]}, {"input_ids": [1, 2, 3]}])  # the item-by-item path
    assert len(ragged) == 2 and ragged[0][1] != ragged[1][1]


def test_the_same_rows_compared_across_ranks_is_known() -> None:
    from lightning_order.checks import same_rows_compared

    val = _split(range(50), _float([0.1]))
    train = [_split(range(r * 100, r * 100 + 100), _float([0.0])) for r in range(2)]
    summaries = [{"rank": r, "train": train[r], "val": val} for r in range(2)]
    assert same_rows_compared(summaries)  # the validation rows, whole on both ranks, with floats
    no_floats = [{"rank": r, "train": train[r], "val": _split(range(50))} for r in range(2)]
    assert not same_rows_compared(no_floats)  # disjoint train shards alone prove nothing alike
    assert not same_rows_compared(summaries[:1])


def test_ranks_with_different_tokenizers_get_the_tokenizers_fix_alone():
    a, b = _split(range(10)), _split(range(10, 20))  # ids differ too: encoded with another vocabulary
    summaries = [
        {"rank": 0, "val": a, "tokenizer": "f" * 32, "model": {"embedding_rows": 512}},
        {"rank": 1, "val": b, "tokenizer": "e" * 32, "model": {"embedding_rows": 513}},
    ]
    (v,) = check_rank_datasets(summaries)
    assert v.rule == "rank-mismatch" and "different tokenizers" in v.message
    assert "tokenizer.json" in v.fix and "random_split" not in v.fix
    same = [{**s, "tokenizer": "f" * 32} for s in summaries]
    assert "random_split" in check_rank_datasets(same)[-1].fix  # the split's own finding, as before


def _mesh_rank(rank: int, tp: int, train, val) -> dict:
    return {"rank": rank, "data_parallel": {"size": 2, "rank": rank // tp}, "train": train, "val": val}


def test_a_datamodule_sharding_by_the_data_parallel_rank_is_silent_inside_tensor_parallel_groups():
    # dp 2 x tp 2: ranks 0, 1 read share A, ranks 2, 3 share B (the same rows inside a group).
    val = _split(range(1000, 1100))
    shares = [_split(range(0, 100), _float([0.0])), _split(range(100, 200), _float([0.0]))]
    summaries = [_mesh_rank(r, 2, shares[r // 2], val) for r in range(4)]
    assert check_rank_datasets(summaries) == []


def test_different_train_sets_inside_a_tensor_parallel_group_are_rank_mismatch_naming_the_group():
    val = _split(range(1000, 1100))
    summaries = [_mesh_rank(r, 2, _split(range(100 * r, 100 * r + 100)), val) for r in range(4)]
    (violation,) = check_rank_datasets(summaries)
    assert violation.rule == "rank-mismatch" and violation.details["dimension"] == "tensor_parallel"
    assert "ranks 0, 1 form one tensor-parallel group (data-parallel rank 0)" in violation.message
    assert "distributed_sampler_kwargs" in violation.fix


def test_per_rank_statistics_inside_a_tensor_parallel_group_are_still_shard_before_normalize():
    val = _split(range(1000, 1100))
    ids = range(100)
    summaries = [_mesh_rank(r, 2, _split(ids, _float([0.1 * r])), val) for r in range(2)]
    (violation,) = check_rank_datasets(summaries)
    assert violation.rule == "shard-before-normalize"


def test_an_item_hashes_alike_alone_in_a_ragged_chunk_and_in_a_stacked_one():
    # litgpt's SFTDataset items (#48): 1-D tensors of each row's length and a dict of counts. A
    # chunk of one item stacks, a chunk of rows of several lengths does not: the same row must
    # hash alike both ways, or a split is judged random and two splits' twins never match.
    from lightning_order.callbacks.validator.content import hash_items

    def sft(ids: list[int]) -> dict:
        return {
            "input_ids": torch.tensor(ids),
            "labels": torch.tensor([-100, *ids[1:]]),
            "token_counts": {"raw": len(ids) - 1, "raw_plus_prompt_template": len(ids)},
        }

    rows = [sft([3, 4, 5]), sft([3, 4, 5, 6, 7]), sft([9, 9])]
    alone = [hash_items([row])[0] for row in rows]
    assert hash_items(rows) == alone
    assert hash_items([sft([3, 4, 5]), sft([1, 2, 3])])[0] == alone[0]  # a stacked chunk of two
    # Rows cut to the same tokens are one input, whatever the counts of their uncut text.
    recounted = {**sft([3, 4, 5]), "token_counts": {"raw": 40, "raw_plus_prompt_template": 90}}
    assert item_hashes(recounted)[1] == alone[0][1] and item_hashes(recounted)[0] != alone[0][0]


def test_counts_beside_the_token_ids_are_no_token_ids():
    # litgpt's batches carry token_counts["raw_plus_prompt_template"] (a row's length, 2 309 in a
    # long-form SFT set): read as a token id it gave a false init-before-data (#48).
    batch = {
        "input_ids": torch.tensor([[5, 9, 2], [4, 0, 0]]),
        "labels": torch.tensor([[5, 9, 2], [4, -100, -100]]),
        "token_counts": {"raw": torch.tensor([[2], [1]]), "raw_plus_prompt_template": torch.tensor([[2309], [1]])},
        "position_ids": torch.tensor([[0, 1, 2], [0, 1, 2]]),
        "doc_ids": torch.tensor([[700, 700, 700], [701, 701, 701]]),
        "token_type_ids": torch.tensor([[0, 0, 1], [0, 0, 1]]),
    }

    class DM:
        def train_dataloader(self):
            rows = [{k: (v[i] if torch.is_tensor(v) else {n: c[i] for n, c in v.items()}) for k, v in batch.items()}
                    for i in range(2)]
            return torch.utils.data.DataLoader(rows, batch_size=2)

    summary = summarize_splits(DM(), {"train": 2, "val": None}, sample_rows=16, whole_rows=1000)
    assert summary["train"]["max_token_id"] == 9


def test_an_overlap_of_rows_all_alike_names_rows_cut_to_their_common_start():
    # litgpt SFT with max_seq_length shorter than the prompt template (#48): every row is the same
    # first tokens, so every validation row has a train twin; deduplicating is not the fix.
    (v,) = check_twin_rate(np.full(200, 7), np.full(20, 7))
    assert "max_seq_length" in v.message and "max_seq_length" in v.fix and v.details["distinct_train"] == 1
    (spread,) = check_twin_rate(np.arange(100), np.arange(95, 105))  # a leak among distinct rows: as before
    assert "max_seq_length" not in spread.message and spread.fix.startswith("deduplicate")

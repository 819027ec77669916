"""rank-mismatch names the setting or item shape that differs per rank, with that field's fix (#37)."""

from __future__ import annotations

from lightning_order.checks.datasets import check_rank_datasets
from lightning_order.checks.rank_settings import check_rank_settings


def _split(ids, shapes):
    ids = [int(i) for i in ids]
    return {"length": len(ids), "whole": True, "ids": ids, "inputs": ids, "floats": {}, "random": False,
            "shapes": shapes}  # fmt: skip


def _ranks(block_sizes, settings=True):
    return [
        {
            "rank": r,
            "val": _split(range(r * 100, r * 100 + 50 - b), {"0": [b], "label": [b]}),
            "train": _split(range(r * 100 + 50, r * 100 + 90 - b), {"0": [b], "label": [b]}),
            "settings": {"block_size": b, "batch_size": 8} if settings else {},
        }
        for r, b in enumerate(block_sizes)
    ]


def test_another_block_size_on_one_rank_names_the_field_and_its_fix_not_random_split():
    summaries = _ranks([32, 64])
    (v,) = check_rank_datasets(summaries)
    assert v.rule == "rank-mismatch" and v.details["fields"] == ["block_size"]
    assert "block_size (rank 0: 32, rank 1: 64)" in v.message
    assert "same block_size" in v.fix and "random_split" not in v.fix


def test_without_settings_the_item_shape_is_named():
    (v,) = check_rank_datasets(_ranks([32, 64], settings=False))
    assert v.rule == "rank-mismatch" and v.details["item"] == "val-shapes"
    assert "0 (rank 0: [32], rank 1: [64])" in v.message and "block size" in v.fix
    assert "random_split" not in v.fix


def test_the_same_settings_and_shapes_are_silent_and_the_split_keeps_its_own_fix():
    summaries = _ranks([32, 32])
    assert check_rank_settings(summaries, [0, 1]) == []
    assert "random_split" in check_rank_datasets(summaries)[-1].fix  # different rows, same settings

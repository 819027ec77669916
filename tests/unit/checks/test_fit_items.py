"""checks/fit_items.py: fit-before-split from the held-out items a fitted step's input held."""

from __future__ import annotations

import json

import numpy as np

from lightning_order.checks.fit_items import check_fitted_items
from lightning_order.item_hashes import SAMPLE, held_out_sample, item_hashes
from lightning_order.ledger import StepRecord


def _record(seen: dict[str, list[int]]) -> StepRecord:
    return StepRecord("build_vocab", 1, stats={"held_out_seen": seen})


def test_enough_held_out_items_is_fit_before_split_with_the_count() -> None:
    (found,) = check_fitted_items([_record({"val": [24, 120, 120]})])
    assert found.rule == "fit-before-split"
    assert "build_vocab learned from 24 of the 120 val items: fit it on the train split only" in found.message


def test_a_few_items_shared_by_chance_are_silent() -> None:
    assert check_fitted_items([_record({"val": [4, 10, 10]}), _record({"val": [6, 100, 100]})]) == []


def test_item_hashes_of_rows_and_a_bounded_json_sample() -> None:
    rows = np.arange(12).reshape(4, 3)
    assert item_hashes(rows) == item_hashes(list(rows))
    assert item_hashes("text") is None and item_hashes({"a": 1}) is None and item_hashes(3) is None
    sample = held_out_sample([f"doc {i}" for i in range(SAMPLE * 2)])
    assert sample is not None and sample["count"] == SAMPLE * 2 and len(sample["hashes"]) == SAMPLE
    assert json.loads(json.dumps(sample)) == sample

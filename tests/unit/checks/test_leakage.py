"""Leakage checks: key-hash overlap (exact and sampled by hash), row hashes, fitted-on-train."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_order.checks import check_fitted_on_train, check_key_overlap, check_row_overlap, row_hashes
from lightning_order.ledger import StepLedger


def _hashes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(
        np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64
    )


def test_disjoint_splits_have_no_overlap():
    assert check_key_overlap(_hashes(5000, 0), _hashes(500, 1)) == []


@pytest.mark.parametrize("shared", [1, 7, 100])
def test_shared_keys_are_train_val_overlap(shared):
    train, val = _hashes(5000, 0), _hashes(500, 1)
    val[:shared] = train[-shared:]
    (violation,) = check_key_overlap(train, val)
    assert violation.rule == "train-val-overlap"
    assert violation.details["keys"] == shared and violation.details["val_rows"] == shared
    assert violation.details["stride"] == 1


def test_large_splits_are_sampled_by_hash_and_still_find_a_large_overlap():
    train, val = _hashes(400_000, 0), _hashes(40_000, 1)
    val[:4000] = train[:4000]
    (violation,) = check_key_overlap(train, val, max_rows=50_000)
    assert violation.details["stride"] == 8
    # A 1/8 sample by hash keeps about 1/8 of the shared keys, on both sides at once.
    assert 300 < violation.details["keys"] < 700
    assert check_key_overlap(train, _hashes(40_000, 2), max_rows=50_000) == []


def test_empty_splits_and_bad_budget():
    assert check_key_overlap([], _hashes(3, 0)) == []
    with pytest.raises(ValueError, match="max_rows"):
        check_key_overlap([1], [1], max_rows=0)


def test_row_hashes_equal_rows_equal_hashes():
    ids = np.arange(12, dtype=np.int64).reshape(4, 3)
    feats = np.ones((4, 2), dtype=np.float32)
    ids[3] = ids[1]
    hashes = row_hashes(ids, feats)
    assert hashes.dtype == np.int64 and len(hashes) == 4
    assert hashes[3] == hashes[1] and len(set(hashes.tolist())) == 3
    with pytest.raises(ValueError, match="rows"):
        row_hashes(ids, feats[:2])


def test_row_overlap_finds_a_copied_row_and_ignores_naturally_repeating_inputs():
    rng = np.random.default_rng(0)
    train, val = rng.normal(size=(300, 4)), rng.normal(size=(50, 4))
    val[10] = train[123]
    assert check_row_overlap(row_hashes(train), row_hashes(val)) != []  # the whole train split: a fact
    # A sample of 300 of 1000 train rows: one twin is not extrapolated into a leak (#26) ...
    assert check_row_overlap(row_hashes(train), row_hashes(val), train_rows=1000) == []
    val[20:26] = train[200:206]  # ... seven are
    (violation,) = check_row_overlap(row_hashes(train), row_hashes(val), train_rows=1000)
    assert violation.rule == "train-val-overlap" and "300 of 1000 train rows" in violation.message
    assert violation.details["estimate"]["hits"] == 7 and "95% interval" in violation.message
    assert check_row_overlap(row_hashes(train), row_hashes(rng.normal(size=(50, 4)))) == []
    binary = rng.integers(0, 2, size=(300, 3))  # 8 possible rows: repeats are the data, not a leak
    assert check_row_overlap(row_hashes(binary), row_hashes(binary[:20])) == []


def test_rows_of_a_split_of_unknown_size_are_a_sample_not_the_split():
    # #37: an iterable train split, its first 2048 rows read; one validation window in 512 has a
    # twin (a phrase recurring across documents): a sample's single hit is no leak.
    rng = np.random.default_rng(1)
    train, val = rng.integers(0, 500, size=(2048, 33)), rng.integers(0, 500, size=(512, 33))
    val[7] = train[1000]
    assert check_row_overlap(row_hashes(train), row_hashes(val)) != []  # taken as the whole split: raised
    assert check_row_overlap(row_hashes(train), row_hashes(val), threshold=0.01, unknown_size=True) == []
    val[100:140] = train[:40]  # 41 of 512: beyond doubt, whatever the split's size
    (violation,) = check_row_overlap(row_hashes(train), row_hashes(val), threshold=0.01, unknown_size=True)
    assert violation.rule == "train-val-overlap" and "unknown size" in violation.message
    assert violation.details["estimate"]["hits"] == 41 and not violation.details["estimate"]["exact"]


def test_fitted_on_train_keeps_leakage_rules_only():
    ledger = StepLedger()
    load = ledger.record("load")
    clean = ledger.record("clean", inputs={"load": load.output})
    feats = ledger.record("engineer_features", inputs={"clean": clean.output})
    ledger.record("fit_features", inputs={"engineer_features": feats.output}, fitted_on=feats.output)
    ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": feats.output},
        parts={"train": "t", "val": "v"},
    )
    assert [v.rule for v in check_fitted_on_train(ledger)] == ["fit-before-split"]

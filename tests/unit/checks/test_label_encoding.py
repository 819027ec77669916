"""Label-aware leakage: a target encoding fitted on train + validation rows is ``fit-before-split``.

Real data (``label_data.py``): the standard library's functions, their module as the category,
whether their docstring says what they return as the label. The pure check and the monitor's
detector here; the validator and the monitor in real runs: tests/integration/test_label_leakage.py;
under DDP: tests/distributed/test_label_encoding_ddp.py.
"""

from __future__ import annotations

import numpy as np
from label_data import feature_table, stdlib_rows

from lightning_order.checks.label_encoding import check_label_encoded_features, label_encoding_fits
from lightning_order.checks.symptoms import RunFacts, attribute, detect_label_leak


# -- the pure check ---------------------------------------------------------------------------------
def test_an_encoding_fitted_on_train_and_validation_is_fit_before_split() -> None:
    (violation,) = check_label_encoded_features(
        *feature_table(stdlib_rows(), leak=True), names=["a", "b", "c", "d", "te"]
    )
    assert violation.rule == "fit-before-split"
    assert violation.steps == ("fit_features", "split")
    assert "te in the features encode the label" in violation.message
    (column,) = violation.details["columns"]
    assert column["name"] == "te" and column["ratio"] > 5  # measured: 9.2 (a sound fit: 0.2)
    assert violation.details["kind"] == "label-encoding"


def test_an_encoding_fitted_on_train_only_and_natural_features_pass() -> None:
    rows = stdlib_rows()
    assert check_label_encoded_features(*feature_table(rows, leak=False)) == []
    # The encoding is found and fits the train-only mean best (no false alarm on a sound fit).
    (fit,) = label_encoding_fits(*feature_table(rows, leak=False))
    assert fit.column == 4 and fit.fit_train > fit.fit_all and fit.ratio < 1
    natural = rows.natural.astype(np.float32)
    train, val = ~rows.is_val, rows.is_val
    assert label_encoding_fits(natural[train], rows.label[train], natural[val], rows.label[val]) == []


def test_the_check_is_affine_invariant_and_reads_real_valued_labels() -> None:
    rows = stdlib_rows()
    tx, ty, vx, vy = feature_table(rows, leak=True)
    both = np.concatenate([tx, vx])
    mean, std = both.mean(0), both.std(0)  # standardised, as a fitted normaliser leaves it
    assert check_label_encoded_features((tx - mean) / std, ty, (vx - mean) / std, vy)
    # A real-valued target (the docstring's log length), encoded per module on all rows.
    target = rows.natural[:, 0]
    positives = np.bincount(rows.module, weights=target)
    counts = np.bincount(rows.module)
    encoded = ((positives + target.mean()) / (counts + 1))[rows.module][:, None]
    train, val = ~rows.is_val, rows.is_val
    found = check_label_encoded_features(encoded[train], target[train], encoded[val], target[val])
    assert [v.rule for v in found] == ["fit-before-split"]


def test_too_little_evidence_gives_no_verdict() -> None:
    tx, ty, vx, vy = feature_table(stdlib_rows(), leak=True)
    assert check_label_encoded_features(tx, ty, vx[:20], vy[:20]) == []  # under min_val_rows
    assert check_label_encoded_features(tx[:, :4], ty, vx[:, :4], vy) == []  # no encoding
    assert label_encoding_fits(tx, ty[:-1], vx, vy) == []  # labels that do not match the rows


def test_the_monitor_detector_names_fit_before_split() -> None:
    (violation,) = check_label_encoded_features(*feature_table(stdlib_rows(), leak=True))
    diagnosis = detect_label_leak(violation.details["columns"], train_loss=0.5, val_loss=0.45, step=50)
    assert diagnosis.symptom == "train-val-gap" and diagnosis.suspected_rule == "fit-before-split"
    assert diagnosis.evidence["trigger"] == "label-encoded-feature" and diagnosis.step == 50
    assert attribute(diagnosis, RunFacts()).suspected_rule == "fit-before-split"
    assert detect_label_leak([{"name": "te", "ratio": 1.2}], train_loss=0.5, val_loss=0.4) is None


# -- the callbacks on a hand-written datamodule (no glue) ------------------------------------------------


# -- OrderedDataModule: the encoded column comes in the input file ---------------------------------------


# -- under DDP: every rank's shard joined, the same verdict on every rank -------------------------------

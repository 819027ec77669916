"""Model dims against data dims (exact) and against what batches show (lower bounds)."""

from __future__ import annotations

import pytest

from lightning_order.checks import check_model_dims

DATA = {"vocab_size": 500, "num_features": 5, "num_classes": 4, "max_length": 32}
MODEL = {"vocab_size": 500, "num_features": 5, "num_classes": 4, "embedding_rows": 500, "feature_in": 5}


def test_matching_dims_pass():
    assert check_model_dims(MODEL, DATA) == []
    assert check_model_dims({}, DATA) == []
    assert check_model_dims({**MODEL, "max_length": 128}, DATA) == []  # the model takes any length


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("vocab_size", 100),
        ("embedding_rows", 100),
        ("num_features", 3),
        ("feature_in", 3),
        ("num_classes", 2),
    ],
)
def test_any_differing_dim_is_init_before_data(key, value):
    (violation,) = check_model_dims({**MODEL, key: value}, DATA)
    assert violation.rule == "init-before-data" and key in violation.details["differing"]
    assert str(value) in violation.message


@pytest.mark.parametrize(
    ("model", "observed", "bad"),
    [
        ({"embedding_rows": 50}, {"max_token_id": 50}, True),
        ({"embedding_rows": 51}, {"max_token_id": 50}, False),
        ({"feature_in": 4}, {"num_features": 5}, True),
        ({"num_classes": 3}, {"max_label": 3}, True),
        ({"num_classes": 4}, {"max_label": 3}, False),
    ],
)
def test_observed_batches_bound_the_model_without_dims(model, observed, bad):
    assert bool(check_model_dims(model, None, observed=observed)) is bad

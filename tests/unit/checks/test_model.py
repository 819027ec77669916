"""Model dims against data dims (exact) and against what batches show (lower bounds)."""

from __future__ import annotations

import pytest

from lightning_order.checks import check_model_dims
from lightning_order.pipelines import all_dims

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


LM_DATA = {"vocab_size": 300, "padded_vocab_size": 320, "block_size": 32}
LM_MODEL = {**LM_DATA, "embedding_rows": 320}


def test_every_pipeline_dim_is_compared_but_any_length_passes():
    assert check_model_dims(LM_MODEL, LM_DATA) == []
    for dim in all_dims():
        model, data = {dim: 7}, {dim: 8}
        expected = [] if dim == "max_length" else ["init-before-data"]  # the classifier takes any length
        assert [v.rule for v in check_model_dims(model, data)] == expected, dim


@pytest.mark.parametrize("block_size", [16, 64])
def test_a_model_of_another_block_size_is_init_before_data(block_size):
    (violation,) = check_model_dims({**LM_MODEL, "block_size": block_size}, LM_DATA)
    assert violation.rule == "init-before-data"
    assert violation.details["differing"] == {"block_size": (block_size, 32)}
    assert f"hparams.block_size is {block_size}, the data's block_size is 32" in violation.message


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

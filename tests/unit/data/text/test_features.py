"""``lightning_order.data.text.features``: engineered features and the streaming statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_order.data.text.features import (
    ENGINEERED_FEATURES,
    engineer_batch,
    fit_statistics,
    streaming_moments,
)
from lightning_order.errors import DataError


def test_engineer_batch_is_rowwise():
    batch = {"text": ["a bb ccc!", "x"], "n": [1.0, 2.0]}
    out = engineer_batch(dict(batch), "text", ["n"])
    assert out["feat_chars"] == [9.0, 1.0]
    assert out["feat_words"] == [3.0, 1.0]
    assert out["feat_punct"][0] == pytest.approx(math.log(2))
    single = engineer_batch({"text": ["x"], "n": [2.0]}, "text", ["n"])
    assert all(single[f] == [out[f][1]] for f in ENGINEERED_FEATURES)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_engineer_batch_rejects_non_finite(bad):
    with pytest.raises(DataError) as info:
        engineer_batch({"text": ["a", "b"], "n": [1.0, bad]}, "text", ["n"])
    assert info.value.column == "n" and info.value.step == "engineer_features"


def test_streaming_moments_match_two_pass():
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.normal(1e4, 3e3, (500, 1)), rng.normal(1e-3, 1e-4, (500, 1))], axis=1)
    blocks = [data[i : i + 37] for i in range(0, len(data), 37)]
    count, mean, std = streaming_moments(blocks)
    assert count == 500
    np.testing.assert_allclose(mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, data.std(axis=0), rtol=1e-10)


def test_fit_statistics_rejects_constant_column():
    import datasets

    ds = datasets.Dataset.from_dict({"a": [1.0, 2.0, 3.0], "c": [5.0, 5.0, 5.0]})
    with pytest.raises(DataError, match="zero variance") as info:
        fit_statistics(ds, ["a", "c"], batch_size=2)
    assert info.value.column == "c" and info.value.step == "fit_features"

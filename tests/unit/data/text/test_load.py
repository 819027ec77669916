"""``lightning_order.data.text.load``: the ``load`` step (demo corpus or files) and its fingerprint."""

from __future__ import annotations

import pytest

from lightning_order.data.engine.runner import DataState, StepContext, declared_fingerprint
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.load import load
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError


def _load(tmp_path, **config):
    # as the runner calls it: with the fingerprint of the config fields the step declares
    cfg = DataConfig(demo_size=60, **config)
    declared = declared_fingerprint(STEPS["load"], cfg, {})
    return load(StepContext(cfg, work=tmp_path, fingerprint=declared), DataState())


def test_demo_seed_changes_the_data_and_seed_does_not(tmp_path):
    # The defect: the corpus was generated with `seed`, so demo_seed changed the fingerprints of
    # the same rows (a false resume-data-changed) and `seed` silently changed the rows.
    base = _load(tmp_path)
    other_demo = _load(tmp_path, demo_seed=1)
    other_split = _load(tmp_path, seed=1)
    assert other_demo.state.data["text"] != base.state.data["text"]
    assert other_demo.output != base.output
    assert other_split.state.data["text"] == base.state.data["text"]
    assert other_split.output == base.output


def test_load_keeps_only_the_configured_columns(tmp_path):
    result = _load(tmp_path)
    assert result.state.data.column_names == ["text", "label", "ratio", "score", "amount"]
    assert result.stats == {"rows": 60} and result.params == {"dataset": "demo"}


def test_a_missing_column_names_it(tmp_path):
    with pytest.raises(DataError) as info:
        _load(tmp_path, label_column="stars")
    assert info.value.step == "load" and info.value.column == "stars"

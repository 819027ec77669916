"""callbacks/validator/evidence.py: what a datamodule says about its data, and which pipeline judges its ledger."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lightning_order import LM_PIPELINE, STANDARD_PIPELINE, Pipeline, Step, StepLedger
from lightning_order.callbacks.validator.phases import data_dims
from lightning_order.recorder import datamodule_ledger, ledger_pipeline

OWN = Pipeline([Step("load", (), "source"), Step("clean", ("load",), "rowwise")])


@pytest.mark.parametrize(
    ("dm_pipeline", "recorded", "configured", "expected"),
    [
        (None, None, STANDARD_PIPELINE, STANDARD_PIPELINE),  # nothing says otherwise: the default
        (LM_PIPELINE, None, STANDARD_PIPELINE, LM_PIPELINE),  # the datamodule's own, one of ours
        (OWN, None, STANDARD_PIPELINE, OWN),  # a user's own pipeline on their datamodule
        (None, "lm", STANDARD_PIPELINE, LM_PIPELINE),  # the name the ledger records
        (None, "no-such-pipeline", STANDARD_PIPELINE, STANDARD_PIPELINE),  # unknown: the configured one
        (LM_PIPELINE, "lm", OWN, OWN),  # configured by the user: kept
    ],
    ids=["default", "datamodule-ours", "datamodule-own", "ledger-name", "unknown-name", "configured"],
)
def test_the_pipeline_that_judges_a_ledger(dm_pipeline, recorded, configured, expected) -> None:
    ledger = StepLedger(info={"pipeline": recorded} if recorded else {})
    dm = SimpleNamespace(ledger=ledger, **({"pipeline": dm_pipeline} if dm_pipeline is not None else {}))
    assert ledger_pipeline(dm, datamodule_ledger(dm), configured) is expected


def test_a_datamodule_without_a_ledger_or_dims() -> None:
    dm = SimpleNamespace(ledger="not a ledger", dims={"vocab_size": 5, "num_classes": None})
    assert datamodule_ledger(dm) is None and datamodule_ledger(None) is None
    assert data_dims(dm) == {"vocab_size": 5} and data_dims(None) == {}
    assert ledger_pipeline(None, None) is STANDARD_PIPELINE

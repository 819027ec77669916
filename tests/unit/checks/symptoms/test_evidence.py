"""What a ledger proves about the leakage rules: fitted steps on the train split, a split by key."""

from __future__ import annotations

import pytest
from helpers import clean_ledger, leaky_ledger

from lightning_order.checks.ledger import judged_pipeline
from lightning_order.checks.symptoms import LedgerProof, ledger_proof
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE


def _ledger(order: list[str], key: str | None = "text", fitted_on: str = "train") -> StepLedger:
    """The standard data steps in ``order``, each consuming the previous output; a split by ``key``."""
    ledger, previous, parts = StepLedger(), None, None
    for step in order:
        inputs = {previous.step: previous.output} if previous is not None else {}
        if step == "split":
            parts = {"train": "t" * 32, "val": "v" * 32}
            params = {"key": key} if key else {}
            previous = ledger.record(step, inputs=inputs, parts=parts, params=params)
        elif step in ("fit_features", "build_vocab"):
            # Before the split, a fitted step learns from the rows it is given: all of them.
            fitted = parts[fitted_on] if parts else previous.output
            previous = ledger.record(step, inputs=inputs, fitted_on=fitted)
        else:
            previous = ledger.record(step, inputs=inputs)
    return ledger


RIGHT = ["load", "clean", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"]


@pytest.mark.parametrize(
    ("ledger", "proof"),
    [
        (_ledger(RIGHT), LedgerProof(fitted_on_train=True, split_by_key=True)),
        (_ledger(RIGHT, key=None), LedgerProof(fitted_on_train=True, split_by_key=None)),  # no key recorded
        (_ledger(RIGHT, fitted_on="val"), LedgerProof(fitted_on_train=False, split_by_key=True)),
        # Split before cleaning: the key hashed is the raw text, near-duplicates straddle it.
        (
            _ledger(["load", "split", "clean", "engineer_features", "fit_features", "build_vocab", "encode"]),
            LedgerProof(fitted_on_train=True, split_by_key=False),
        ),
        # Statistics fitted before the split: on the rows before it.
        (
            _ledger(["load", "clean", "engineer_features", "fit_features", "split", "build_vocab", "encode"]),
            LedgerProof(fitted_on_train=False, split_by_key=True),
        ),
        (_ledger(["load", "clean"]), LedgerProof()),  # no split yet: nothing proven
        (clean_ledger(), LedgerProof(fitted_on_train=True, split_by_key=None)),
        (leaky_ledger(), LedgerProof(fitted_on_train=False, split_by_key=None)),
    ],
)
def test_ledger_proof(ledger: StepLedger, proof: LedgerProof) -> None:
    assert ledger_proof(ledger, STANDARD_PIPELINE) == proof


def test_a_fitted_step_that_did_not_run_or_learned_from_unknown_data_proves_nothing() -> None:
    ledger = _ledger(["load", "clean", "engineer_features", "split", "fit_features"])
    assert ledger_proof(ledger, STANDARD_PIPELINE).fitted_on_train is None  # build_vocab not yet
    unknown = _ledger(RIGHT)
    unknown.record("fit_features", inputs={}, fitted_on=None)  # a hand-written step fed unknown data
    assert ledger_proof(unknown, STANDARD_PIPELINE).fitted_on_train is None


def test_a_hand_written_ledger_is_judged_on_the_steps_it_declares() -> None:
    ledger = _ledger(["load", "clean", "split"], key=None)
    ledger.info["declared_steps"] = ["load", "clean", "split"]
    # No fitted step declared: nothing to prove about one (never a vacuous "all fitted on train").
    assert ledger_proof(ledger, judged_pipeline(STANDARD_PIPELINE, ledger)) == LedgerProof()

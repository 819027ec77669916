"""OrderValidator without a Trainer: its state key, older states loaded, its arguments checked.

In real ``Trainer.fit`` runs: tests/integration/test_order_validator.py.
"""

from __future__ import annotations

import pytest

from lightning_order import STANDARD_PIPELINE, OrderValidator


def test_state_key_and_older_states():
    assert OrderValidator().state_key == OrderValidator(on_violation="warn").state_key
    from lightning_order.order import Step

    custom = STANDARD_PIPELINE.extend(Step("dedupe", ("clean",)), before="split")
    assert OrderValidator(pipeline=custom).state_key != OrderValidator().state_key
    assert OrderValidator().state_key.startswith("OrderValidator{'pipeline': ")
    old = OrderValidator()
    old.load_state_dict({})
    assert old.state_dict() == {"fingerprints": {}, "dims": {}}
    old.load_state_dict({"version": 1, "fingerprints": {"vocab": "v" * 32}, "dims": {"vocab_size": 9}})
    assert old.state_dict() == {"fingerprints": {"vocab": "v" * 32}, "dims": {"vocab_size": 9}}
    old.load_state_dict({"fingerprints": None})
    assert old.state_dict()["fingerprints"] == {}
    with pytest.raises(ValueError, match="on_violation"):
        OrderValidator(on_violation="ignore")

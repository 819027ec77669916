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


def test_state_key_is_derived_from_the_pipeline_as_before_the_package():
    # Checkpoints saved before OrderValidator became a package keep their state under this key.
    from lightning_order import LM_PIPELINE
    from lightning_order.ledger import fingerprint

    for pipeline in (STANDARD_PIPELINE, LM_PIPELINE):
        expected = fingerprint([s.name for s in pipeline], repr(pipeline))[:12]
        assert OrderValidator(pipeline=pipeline).state_key == f"OrderValidator{{'pipeline': '{expected}'}}"


def test_a_saved_state_loads_and_saves_back_unchanged_through_torch(tmp_path):
    import torch

    saved = {
        "fingerprints": {"split": "s" * 32, "vocab": "v" * 32},
        "dims": {"vocab_size": 9, "num_classes": 2},
        "position": {"epoch": 1, "samples": 64, "global_batch": 8, "seed": 0},
    }
    path = tmp_path / "state.pt"
    torch.save(saved, path)
    validator = OrderValidator()
    validator.load_state_dict(torch.load(path, weights_only=True))
    assert validator.state_dict() == saved
    assert validator.fingerprints == saved["fingerprints"] and validator.position == saved["position"]
    torch.save(validator.state_dict(), tmp_path / "again.pt")
    assert torch.load(tmp_path / "again.pt", weights_only=True) == saved


def test_views_before_setup_are_empty_and_read_only():
    validator = OrderValidator()
    assert dict(validator.observed) == {} and dict(validator.evidence) == {}
    with pytest.raises(TypeError):
        validator.observed["max_token_id"] = 1  # type: ignore[index]

"""SymptomMonitor without a Trainer: its arguments are checked, its state key and hooks override Lightning's.

On real training runs: tests/integration/test_symptom_monitor.py and test_symptom_monitor_silent.py.
"""

from __future__ import annotations

import pytest

from lightning_order.callbacks.monitor.callback import SymptomMonitor


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on_symptom": "explode"}, "on_symptom"),
        ({"check_every_n_steps": 0}, "check_every_n_steps"),
        ({"symptoms": ["wobble"]}, "unknown symptom"),
        ({"thresholds": {"wobble": {}}}, "unknown symptom"),
    ],
)
def test_arguments_are_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SymptomMonitor(**kwargs)


def test_state_key_and_hooks_override_lightning() -> None:
    assert getattr(SymptomMonitor.state_key.fget, "__override__", False)
    for hook in ("setup", "on_fit_start", "on_train_batch_end", "on_validation_end", "state_dict"):
        assert getattr(getattr(SymptomMonitor, hook), "__override__", False), hook

"""``recover()`` on a paused checkpoint: the init path keeps the matching weights, the advice follows the
progress, a starved run resumes.

Recovery of real paused runs: tests/integration/test_recovery.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.models import OrderedTextClassifier
from lightning_order.recovery import RecoveryPlan, recover, waste_report

DIMS = {"vocab_size": 80, "num_features": 5, "num_classes": 4, "max_length": 32}


def _wrong_model() -> OrderedTextClassifier:
    torch.manual_seed(0)
    return OrderedTextClassifier(vocab_size=50, num_features=3, num_classes=4, max_length=32)


def _paused_checkpoint(
    tmp_path: Path, model: torch.nn.Module, reason: dict, progress_steps: int = 50
) -> Path:
    path = tmp_path / "pause.ckpt"
    torch.save(
        {
            "state_dict": model.state_dict(),
            "hyper_parameters": dict(model.hparams),
            CHECKPOINT_KEY: {
                "reason": [reason],
                "model": {"class": "lightning_order.models.OrderedTextClassifier"},
                "waste": waste_report(600, 2, step=progress_steps, planned_steps=1000, gpu_hour_price=3.0),
            },
        },
        path,
    )
    return path


def test_recover_init_path_keeps_matching_weights(tmp_path: Path) -> None:
    model = _wrong_model()
    reason = {
        "type": "violation",
        "rule": "init-before-data",
        "steps": ["init_model", "encode"],
        "message": "x",
    }
    path = _paused_checkpoint(tmp_path, model, reason)
    plan = recover(path, datamodule=SimpleNamespace(dims=DIMS))
    assert isinstance(plan, RecoveryPlan)
    assert plan.path == "init" and plan.ckpt_path is None
    assert sorted(plan.reinitialised) == ["embedding.weight", "feature_proj.weight"]
    new_state = plan.model.state_dict()
    for name, value in model.state_dict().items():
        if name not in plan.reinitialised:
            assert torch.equal(new_state[name], value), name
    assert plan.advice == "continue" and "device-hours" in plan.reason
    assert plan.fit_kwargs() == {"model": plan.model, "datamodule": plan.datamodule, "ckpt_path": None}


@pytest.mark.parametrize(
    ("steps", "advice"),
    [(10, "restart"), (400, "continue")],
)
def test_recover_advice_follows_progress(tmp_path: Path, steps: int, advice: str) -> None:
    reason = {"type": "violation", "rule": "init-before-data", "steps": ["init_model"], "message": "x"}
    path = _paused_checkpoint(tmp_path, _wrong_model(), reason, progress_steps=steps)
    plan = recover(path, datamodule=SimpleNamespace(dims=DIMS))
    assert plan.advice == advice
    assert f"{steps / 1000:.0%}" in plan.reason
    fresh = plan.fresh_model()
    assert fresh.hparams.vocab_size == DIMS["vocab_size"]
    assert not torch.equal(fresh.head[0].weight, plan.model.head[0].weight)


def test_recover_resume_path_for_starvation(tmp_path: Path) -> None:
    model = OrderedTextClassifier(**DIMS)
    reason = {"type": "diagnosis", "symptom": "data-starvation", "suspected_rule": "out-of-order", "step": 30}
    path = _paused_checkpoint(tmp_path, model, reason)
    plan = recover(path)
    assert plan.path == "resume" and plan.advice == "continue" and plan.ckpt_path == str(path)
    assert all(
        torch.equal(a, b) for a, b in zip(plan.model.state_dict().values(), model.state_dict().values())
    )

"""Pure decisions on a pause's payload: the repair path, the kept share, continue or restart."""

from __future__ import annotations

import pytest

from lightning_order.cost import waste_report
from lightning_order.recovery import advise, choose_path
from lightning_order.recovery.decisions import kept_share


def _diagnosis(symptom: str, rule: str = "out-of-order") -> dict:
    return {"type": "diagnosis", "symptom": symptom, "suspected_rule": rule}


def _violation(rule: str) -> dict:
    return {"type": "violation", "rule": rule, "steps": ["a"], "message": "m"}


@pytest.mark.parametrize(
    ("reasons", "path"),
    [
        ([], "data"),  # no reason recorded: re-preparing in the mandated order is the safe repair
        ([_diagnosis("data-starvation")], "resume"),
        ([_diagnosis("data-starvation"), _diagnosis("memory-swing")], "resume"),
        ([_diagnosis("data-starvation"), _diagnosis("plateau", "vocab-before-clean")], "data"),
        ([_violation("init-before-data")], "init"),
        ([_diagnosis("loss-oscillation", "init-before-data")], "init"),
        ([_violation("init-before-data"), _violation("fit-before-split")], "data"),
        ([_violation("shard-before-normalize")], "data"),
    ],
)
def test_choose_path(reasons: list[dict], path: str) -> None:
    assert choose_path(reasons) == path


def test_kept_share_counts_elements() -> None:
    sizes = {"a": 30, "b": 60, "c": 10}
    assert kept_share(sizes, ["a", "c"]) == pytest.approx(0.4)
    assert kept_share(sizes, ["zzz"]) == 0.0 and kept_share({}, []) == 0.0


@pytest.mark.parametrize(
    ("path", "steps", "share", "advice", "phrase"),
    [
        ("resume", 10, 0.0, "continue", "resume"),
        ("data", 10, 1.0, "restart", "under 5% of its plan"),
        ("data", 400, 0.3, "restart", "only 30% of the weights could be kept"),
        ("init", 400, 0.9, "continue", "90% of the weights are kept or remapped"),
    ],
)
def test_advise(path: str, steps: int, share: float, advice: str, phrase: str) -> None:
    waste = waste_report(3600, 2, step=steps, planned_steps=1000, gpu_hour_price=3.0)
    got, why = advise(path, waste, share, restart_below=0.05, min_kept=0.5)
    assert got == advice and phrase in why
    assert "2 device-hours on 2 device(s), cost 6.00" in why


def test_advise_without_a_waste_report() -> None:
    advice, why = advise("init", {}, 0.9, restart_below=0.05, min_kept=0.5)
    assert advice == "continue" and "an unknown amount of device time" in why

"""The checkpoint's train loader states against this run's train loaders (``resume-position``)."""

from __future__ import annotations

from lightning_order.checks.loader_states import check_loader_states, stored_loader_states
from lightning_order.positions import GlobalOrder, TrainPosition

RULE = GlobalOrder(100, 10, 1, 0)
POSITION = TrainPosition.of(RULE, 0, 40, RULE.digest(0)).to_dict()


def _checkpoint(*states: object) -> dict:
    return {"loops": {"fit_loop": {"state_dict": {"combined_loader": list(states)}}}}


def test_the_stored_states_are_read_from_lightnings_loop_state_and_nothing_else():
    assert stored_loader_states(_checkpoint(POSITION)) == [POSITION]
    assert stored_loader_states({}) == [] and stored_loader_states({"loops": None}) == []
    assert stored_loader_states({"loops": {"fit_loop": {"state_dict": {}}}}) == []
    assert stored_loader_states({"loops": {"fit_loop": {"state_dict": {"combined_loader": "x"}}}}) == []


def test_a_plain_loader_for_a_resumable_ones_state_is_resume_position_naming_both_and_the_fix():
    (violation,) = check_loader_states([POSITION], [("DataLoader", False)])
    assert violation.rule == "resume-position" and violation.steps == ("train",)
    assert "a ResumableLoader at sample 40 of epoch 0" in violation.message
    assert "this run's train loader (DataLoader) has 0 that can take it" in violation.message
    assert "The CombinedLoader has 0 stateful loaders" in violation.message
    assert "OrderedDataModule / OrderedLMDataModule's train_dataloader()" in violation.fix
    assert "state_dict/load_state_dict" in violation.fix and "without ckpt_path" in violation.fix
    assert violation.details == {"states": 1, "stateful": 0, "loaders": ["DataLoader"]}


def test_loaders_that_take_every_state_or_no_state_pass():
    assert check_loader_states([POSITION], [("ResumableLoader", True)]) == []
    assert check_loader_states([], [("DataLoader", False)]) == []
    assert check_loader_states([POSITION], []) == []  # loaders unknown: Lightning's own check stands
    # Another loader's state (not a position of ours) is counted too, without a position to name.
    (violation,) = check_loader_states([{"_snapshot": {}}], [("DataLoader", False)])
    assert "resumable train loader(s), but" in violation.message

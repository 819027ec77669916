"""Resume: stored vs current data fingerprints."""

from __future__ import annotations

import pytest

from lightning_order.checks import check_restore_shapes, check_resume, check_resume_proof

FPS = {"manifest": "m" * 32, "split": "s" * 32, "statistics": "t" * 32, "vocab": "v" * 32}


def test_same_data_or_unknown_data_pass():
    assert check_resume(FPS, dict(FPS)) == []
    assert check_resume(None, FPS) == [] and check_resume({}, FPS) == [] and check_resume(FPS, {}) == []
    assert check_resume({"vocab": FPS["vocab"]}, FPS) == []  # an older checkpoint stored less


@pytest.mark.parametrize(
    ("key", "phrase"),
    [
        ("vocab", "token ids would silently mean other words"),
        ("statistics", "scaled differently"),
        ("split", "split changed"),
        ("manifest", "prepared data changed"),
    ],
)
def test_a_changed_fingerprint_is_resume_data_changed_naming_it(key, phrase):
    (violation,) = check_resume(FPS, {**FPS, key: "x" * 32})
    assert violation.rule == "resume-data-changed"
    assert phrase in violation.message and f"{key} {FPS[key][:12]} -> xxxxxxxxxxxx" in violation.message
    assert violation.details["changed"] == [key]


def test_the_most_telling_change_leads():
    (violation,) = check_resume(FPS, {**FPS, "manifest": "a", "vocab": "b"})
    assert violation.details["changed"] == ["vocab", "manifest"]
    assert violation.message.startswith("the vocabulary changed")
    assert violation.steps == ("build_vocab", "encode")


def test_a_checkpoint_without_fingerprints_cannot_prove_the_data():
    (violation,) = check_resume_proof(None, FPS)
    assert violation.rule == "resume-data-changed"
    assert "cannot prove the data is unchanged" in violation.message
    assert "OrderValidator(on_violation='warn')" in violation.fix
    assert check_resume_proof({}, FPS) == check_resume_proof(None, FPS)
    assert check_resume_proof(FPS, FPS) == [] and check_resume_proof({"vocab": "v"}, FPS) == []
    assert check_resume_proof(None, {}) == []  # this run has nothing to compare either: nothing to prove


@pytest.mark.parametrize(("fits", "rule"), [(True, "resume-data-changed"), (False, "init-before-data")])
def test_a_shape_mismatch_is_named_by_its_order_error_with_both_shapes(fits, rule):
    stored = {"embedding.weight": (300, 8), "head.weight": (2, 8), "only.in.checkpoint": (1,)}
    model = {"embedding.weight": (200, 8), "head.weight": (2, 8)}
    (violation,) = check_restore_shapes(stored, model, model_fits_data=fits)
    assert violation.rule == rule
    assert "embedding.weight: checkpoint [300, 8] vs model [200, 8]" in violation.message
    assert "head.weight" not in violation.message
    assert violation.details["shapes"] == {"embedding.weight": {"checkpoint": [300, 8], "model": [200, 8]}}
    assert check_restore_shapes(model, dict(model), model_fits_data=fits) == []

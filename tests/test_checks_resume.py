"""Resume: stored vs current data fingerprints."""

from __future__ import annotations

import pytest

from lightning_order.checks import check_resume

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

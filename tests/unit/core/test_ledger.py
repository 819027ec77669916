"""Tests of the StepLedger: records and the hash chain, the manifest round trip, rejection of
tampered and truncated manifests, state_dict round trips."""

from __future__ import annotations

import json
import os
import stat

import pytest

from lightning_order import ManifestError, StepLedger, fingerprint, step_fingerprint


def small_ledger() -> StepLedger:
    ledger = StepLedger(info={"dims": {"vocab_size": 100}})
    load = ledger.record("load", params={"dataset": "demo", "size": 10}, stats={"rows": 10})
    clean = ledger.record("clean", inputs={"load": load.output}, params={"lowercase": True})
    ledger.record(
        "split",
        inputs={"clean": clean.output},
        parts={"train": "t" * 32, "val": "v" * 32},
        stats={"train_rows": 9, "val_rows": 1},
    )
    return ledger


def test_records_are_numbered_and_chained():
    ledger = small_ledger()
    assert [r.seq for r in ledger] == [0, 1, 2]
    assert ledger.steps() == ["load", "clean", "split"]
    load, clean, _ = ledger
    assert clean.inputs == {"load": load.output}
    assert load.output == step_fingerprint("load", params={"dataset": "demo", "size": 10})


def test_fingerprints_depend_on_params_and_inputs_not_their_order():
    a = step_fingerprint("clean", params={"x": 1, "y": 2}, inputs={"load": "f"})
    b = step_fingerprint("clean", params={"y": 2, "x": 1}, inputs={"load": "f"})
    assert a == b
    assert a != step_fingerprint("clean", params={"x": 1, "y": 3}, inputs={"load": "f"})
    assert a != step_fingerprint("clean", params={"x": 1, "y": 2}, inputs={"load": "g"})
    assert a != step_fingerprint("clean", version="2", params={"x": 1, "y": 2}, inputs={"load": "f"})
    assert len(a) == 32 and a.isalnum()  # safe as a file name


def test_upstream_change_changes_everything_downstream():
    first = small_ledger()
    second = StepLedger()
    load = second.record("load", params={"dataset": "demo", "size": 11})
    clean = second.record("clean", inputs={"load": load.output}, params={"lowercase": True})
    assert clean.output != first[1].output
    assert first.fingerprint != second.fingerprint


def test_ledger_fingerprint_ignores_time_rank_and_stats():
    a, b = small_ledger(), small_ledger()
    assert a.fingerprint == b.fingerprint
    c = StepLedger(rank=1)
    for rec in a:
        c.record(
            rec.step, inputs=rec.inputs, output=rec.output, parts=rec.parts, params=rec.params, stats={"x": 1}
        )
    assert c.fingerprint == a.fingerprint


def test_manifest_round_trip(tmp_path):
    ledger = small_ledger()
    path = ledger.save(tmp_path / "manifest.json")
    again = StepLedger.load(path)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in ledger]
    assert again.info == {"dims": {"vocab_size": 100}}
    assert again.fingerprint == ledger.fingerprint
    assert StepLedger.load(tmp_path).fingerprint == ledger.fingerprint  # folder form
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.__setitem__("records", s["records"][:-1]),
        lambda s: s["records"][1].__setitem__("output", "0" * 32),
        lambda s: s["records"][0]["params"].__setitem__("size", 99),
        lambda s: s["info"].__setitem__("dims", {"vocab_size": 1}),
    ],
    ids=["dropped-record", "changed-output", "changed-param", "changed-info"],
)
def test_tampered_manifest_is_rejected(tmp_path, tamper):
    path = small_ledger().save(tmp_path / "manifest.json")
    state = json.loads(path.read_text())
    tamper(state)
    path.write_text(json.dumps(state))
    with pytest.raises(ManifestError, match="checksum"):
        StepLedger.load(path)


def test_truncated_manifest_is_rejected(tmp_path):
    path = small_ledger().save(tmp_path / "manifest.json")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ManifestError, match="truncated or corrupt"):
        StepLedger.load(path)


def test_missing_and_foreign_manifests_are_rejected(tmp_path):
    with pytest.raises(ManifestError, match="no ledger manifest"):
        StepLedger.load(tmp_path / "nope.json")
    (tmp_path / "other.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ManifestError, match="not a lightning_order manifest"):
        StepLedger.load(tmp_path / "other.json")


def test_save_over_an_existing_manifest_is_atomic(tmp_path):
    path = small_ledger().save(tmp_path / "m.json")
    bigger = small_ledger()
    bigger.record("fit_features", inputs={"split": "t" * 32}, fitted_on="t" * 32)
    bigger.save(path)
    assert StepLedger.load(path).steps()[-1] == "fit_features"


def test_state_dict_round_trip_and_bad_sequence():
    ledger = small_ledger()
    again = StepLedger.from_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert again.fingerprint == ledger.fingerprint
    state = ledger.state_dict()
    state["records"][1]["seq"] = 5
    with pytest.raises(ManifestError, match="numbered"):
        StepLedger.from_state_dict(state)


def test_nan_and_numpy_values_are_stored_stably():
    np = pytest.importorskip("numpy")
    ledger = StepLedger()
    rec = ledger.record("fit_features", stats={"mean": [np.float64(1.5), float("nan")], "n": np.int64(3)})
    assert rec.stats == {"mean": [1.5, "nan"], "n": 3}
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})


def test_latest_and_has():
    ledger = small_ledger()
    assert ledger.latest("clean").seq == 1
    assert ledger.latest("train") is None
    assert ledger.has("split") and not ledger.has("encode")
    assert "load -> clean -> split" in repr(ledger)


def test_a_manifest_path_planted_as_a_link_is_replaced_never_written_through(tmp_path):
    secret = tmp_path / "notes.txt"
    secret.write_bytes(b"the user's own bytes\n")
    folder = tmp_path / "prepared"
    folder.mkdir()
    (folder / "manifest.json").symlink_to(secret)
    small_ledger().save(folder)
    assert secret.read_bytes() == b"the user's own bytes\n"
    assert not (folder / "manifest.json").is_symlink()
    assert StepLedger.load(folder).fingerprint == small_ledger().fingerprint
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]  # no temporary file left


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_manifest_mode_is_the_umasks_like_every_other_file(tmp_path, umask):
    """Not mkstemp's 0600: another user who may read the cache may read its manifest (issue #32)."""
    old = os.umask(umask)
    try:
        path = small_ledger().save(tmp_path)
        (tmp_path / "other.json").write_text("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "other.json").stat().st_mode)

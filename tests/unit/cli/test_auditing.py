"""``lightning-order audit``: exit codes for clean, violated, unreadable and incomplete pipelines.

(Auditing a checkpoint, and that nothing in one runs: tests/integration/test_checkpoint_safety.py;
the installed command's exit code: tests/integration/test_command_line.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import clean_ledger, leaky_ledger

from lightning_order.checkpoint import SHARDED_META, tie_shards
from lightning_order.cli import main
from lightning_order.cli.auditing import AUDIT_OK, AUDIT_UNREADABLE, AUDIT_VIOLATIONS, find_manifests
from lightning_order.ledger import CHECKPOINT_KEY


@pytest.mark.parametrize("target", ["root", "folder", "manifest"])
def test_audit_clean_exits_zero(prepared: Path, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = find_manifests(prepared)[0]
    path = {"root": prepared, "folder": manifest.parent, "manifest": manifest}[target]
    assert main(["audit", str(path)]) == AUDIT_OK
    out = capsys.readouterr().out
    for column in ("step", "seq", "kind", "fitted on", "rows", "fingerprint"):
        assert column in out
    assert "build_vocab" in out and "train split" in out
    assert "no violation" in out


def test_audit_violation_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = leaky_ledger().save(tmp_path / "leaky")
    assert main(["audit", str(path)]) == AUDIT_VIOLATIONS
    out = capsys.readouterr().out
    assert "fit-before-split" in out and "val split" in out


def test_audit_cache_root_with_one_bad_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, ledger in (("good", clean_ledger()), ("bad", leaky_ledger())):
        (tmp_path / name).mkdir()
        ledger.save(tmp_path / name)  # <root>/<folder>/manifest.json, as a cache root holds them
    assert main(["audit", str(tmp_path)]) == AUDIT_VIOLATIONS
    assert "2 prepared pipelines audited: violations found" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["edited", "truncated"])
def test_audit_unreadable_manifest_exits_two(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = clean_ledger().save(tmp_path / "p")
    text = path.read_text()
    if damage == "edited":
        state = json.loads(text)
        state["records"][0]["stats"]["rows"] = 11
        path.write_text(json.dumps(state))
    else:
        path.write_text(text[: len(text) // 2])
    assert main(["audit", str(path)]) == AUDIT_UNREADABLE
    out = capsys.readouterr().out
    assert ("checksum" if damage == "edited" else "not valid JSON") in out


def test_audit_prepared_folder_missing_data_exits_two(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = find_manifests(prepared)[0].parent
    copy = shutil.copytree(folder, tmp_path / folder.name)
    shutil.rmtree(copy / "train")
    assert main(["audit", str(copy)]) == AUDIT_UNREADABLE
    assert "incomplete" in capsys.readouterr().out


def test_audit_nothing_there_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(tmp_path / "missing")]) == AUDIT_UNREADABLE
    assert main(["audit", str(tmp_path)]) == AUDIT_UNREADABLE  # a folder without any manifest
    assert "lightning-order prepare" in capsys.readouterr().out


def _sharded_folder(root: Path, name: str) -> Path:
    """A distributed checkpoint folder (shards, their index, a tied meta.pt carrying a clean ledger)."""
    folder = root / name
    folder.mkdir()
    (folder / ".metadata").write_bytes(f"index of {name}".encode())
    (folder / "__0_0.distcp").write_bytes(b"w" * 32)
    meta = {"pytorch-lightning_version": "2.6.0", CHECKPOINT_KEY: {"ledger": clean_ledger().state_dict()}}
    tie_shards(meta, folder)
    return folder


def test_audit_of_a_sharded_checkpoint_folder_reads_its_meta_pt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #42: ``audit`` of a distributed checkpoint folder answered "no manifest.json"."""
    folder = _sharded_folder(tmp_path, "epoch=0-step=2.ckpt")
    assert main(["audit", str(folder)]) == AUDIT_OK
    out = capsys.readouterr().out
    assert "no manifest.json" not in out and "build_vocab" in out and "no violation" in out


def test_audit_of_a_folder_mixing_two_checkpoints_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, c = _sharded_folder(tmp_path, "a"), _sharded_folder(tmp_path, "c")
    shutil.copy(c / SHARDED_META, a / SHARDED_META)
    assert main(["audit", str(a)]) == AUDIT_UNREADABLE
    assert "was not written with the shards beside it" in capsys.readouterr().out


def test_audit_help_names_every_kind_of_path_it_takes_checkpoints_included() -> None:
    from lightning_order.cli.help import TOOLS
    from lightning_order.cli.tools import tool_parser

    text = " ".join(tool_parser("audit").format_help().split())
    for kind in ("cache_dir root", "manifest.json", ".ckpt", "distributed checkpoint folder"):
        assert kind in text, kind
    assert "checkpoint" in TOOLS["audit"]

"""``audit`` and ``graph`` on hostile paths and manifests: never a hang, never a raw error, exit 2.

A script reads exit 1 as "violations found", so a manifest that cannot be judged must be exit 2
("unreadable") with one line saying why: a FIFO or device named ``manifest.json`` (which used to
hang the reader), records re-sealed with a valid checksum but odd content (which used to raise a
raw ``AttributeError``/``TypeError``/``KeyError``, exit 1), and deeply nested JSON (which used to
raise ``RecursionError``). A prepared folder is verified whatever its name.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, clean_ledger

from lightning_order.cli import main
from lightning_order.cli.auditing import AUDIT_OK, AUDIT_UNREADABLE, find_manifests
from lightning_order.ledger import fingerprint

_COMMANDS = {
    "audit": lambda path: ["audit", str(path)],
    "graph": lambda path: ["graph", "--manifest", str(path)],
}


def _reseal(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` sealed as :meth:`StepLedger.save` seals it: the records' fingerprint, then the checksum."""
    state = {k: v for k, v in state.items() if k != "checksum"}
    records = state.get("records")
    if isinstance(records, list) and all(isinstance(r, dict) for r in records):
        keys = ("step", "inputs", "output", "fitted_on", "parts", "params", "version")
        defaults = {"inputs": {}, "parts": {}, "params": {}, "version": "1"}
        identity = [{k: r.get(k, defaults.get(k)) for k in keys} for r in records]
        state["fingerprint"] = fingerprint("ledger", identity)
    state["checksum"] = fingerprint("manifest", state)
    return state


def _with_record(index: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        state["records"][index].update(fields)

    return edit


def _without(index: int, name: str) -> Callable[[dict[str, Any]], None]:
    return lambda state: state["records"][index].pop(name)


def _setting(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda state: state.update(copy.deepcopy(fields))


def _info(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda state: state.update(info=copy.deepcopy(fields))


# Each edit re-sealed with a valid checksum: only the content is odd.
ODD = {
    "record-number": _setting(records=[1, 2]),
    "record-list": _setting(records=[[1]]),
    "records-mapping": _setting(records={"a": 1}),
    "records-string": _setting(records="abc"),
    "records-null": _setting(records=None),
    "no-step": _without(0, "step"),
    "no-seq": _without(0, "seq"),
    "step-number": _with_record(0, step=5),
    "step-null": _with_record(0, step=None),
    "seq-string": _with_record(0, seq="0"),
    "seq-bool": _with_record(0, seq=False),
    "inputs-list": _with_record(1, inputs=["load"]),
    "inputs-string": _with_record(1, inputs="load"),
    "input-number": _with_record(1, inputs={"load": 3}),
    "input-mapping": _with_record(1, inputs={"load": {"x": 1}}),
    "parts-list": _with_record(3, parts=[1]),
    "parts-null": _with_record(3, parts=None),
    "output-number": _with_record(0, output=7),
    "output-list": _with_record(0, output=[7]),
    "fitted-on-number": _with_record(4, fitted_on=3),
    "params-list": _with_record(0, params=[1]),
    "stats-list": _with_record(0, stats=[1]),
    "rank-string": _with_record(0, rank="zero"),
    "version-number": _with_record(0, version=2),
    "time-string": _with_record(0, time="now"),
    "meta-list": _with_record(0, meta=[1]),
    "info-list": _setting(info=[1]),
    "info-null": _setting(info=None),
    "dims-list": _info(dims=[1, 2]),
    "dims-string": _info(dims="abc"),
    "pipeline-number": _info(pipeline=3),
    "pipeline-unknown": _info(pipeline="nope"),
    "cache-key-list": _info(cache_key=[1]),
    "files-list": _info(cache_key="a" * 32, files=[1]),
    "file-record-odd": _info(cache_key="a" * 32, files={"x.arrow": 5}),
    "format-version-string": _setting(format_version="9"),
}


def _write_odd(folder: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    state = copy.deepcopy(clean_ledger().state_dict())
    edit(state)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(_reseal(state)))
    return folder


@pytest.mark.parametrize("command", list(_COMMANDS))
@pytest.mark.parametrize("odd", list(ODD))
def test_a_resealed_manifest_with_odd_content_is_unreadable_never_a_raw_error(
    tmp_path: Path, odd: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write_odd(tmp_path / "p", ODD[odd])
    assert main(_COMMANDS[command](folder)) == AUDIT_UNREADABLE
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if "✗" in line]
    assert len(lines) == 1, captured
    assert "manifest.json" in lines[0] and "Traceback" not in captured.err


@pytest.mark.parametrize("command", list(_COMMANDS))
@pytest.mark.parametrize("depth", [900, 100_000], ids=["near-the-limit", "far-past-it"])
@pytest.mark.parametrize("where", ["info", "records"])
def test_deeply_nested_json_is_unreadable(
    tmp_path: Path, command: str, depth: int, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = clean_ledger().state_dict()
    state[where] = "@nested@" if where == "records" else {"x": "@nested@"}
    text = json.dumps(_reseal(state)).replace('"@nested@"', "[" * depth + "]" * depth)
    (tmp_path / "manifest.json").write_text(text)
    assert main(_COMMANDS[command](tmp_path)) == AUDIT_UNREADABLE
    captured = capsys.readouterr()
    assert "manifest.json" in captured.out + captured.err


def test_the_odd_record_message_names_the_record_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write_odd(tmp_path / "p", _with_record(1, inputs=["load"]))
    assert main(["audit", str(folder)]) == AUDIT_UNREADABLE
    out = " ".join(capsys.readouterr().out.split())
    assert "ledger record 1 ('clean')" in out and "'inputs'" in out and "got list" in out


@pytest.mark.parametrize("command", list(_COMMANDS))
@pytest.mark.parametrize("target", ["root", "folder", "manifest"])
def test_a_fifo_named_manifest_is_refused_without_hanging(tmp_path: Path, command: str, target: str) -> None:
    # In a child process with a timeout: the old code blocked forever opening the FIFO.
    folder = tmp_path / "p"
    folder.mkdir()
    os.mkfifo(folder / "manifest.json")
    path = {"root": tmp_path, "folder": folder, "manifest": folder / "manifest.json"}[target]
    code = f"import sys; from lightning_order.cli import main; sys.exit(main({_COMMANDS[command](path)!r}))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"lightning-order {command} hung on a FIFO named manifest.json")
    assert done.returncode == AUDIT_UNREADABLE, done.stderr
    output = " ".join((done.stdout + done.stderr).split())
    assert "is a FIFO, not a regular file" in output and "Traceback" not in output


@pytest.mark.parametrize("name", ["run.ckpt", "manifest.json"])
def test_a_device_is_refused_without_reading_it(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this machine")
    link = tmp_path / name
    link.symlink_to("/dev/zero")  # endless zeros: reading it would never end
    assert main(["audit", str(link)]) == AUDIT_UNREADABLE
    assert "is a device, not a regular file" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("target", ["folder", "manifest"])
def test_a_renamed_prepared_folder_still_verifies_its_files(
    prepared: Path, tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = find_manifests(prepared)[0].parent
    renamed = Path(shutil.copytree(folder, tmp_path / "my-prepared-data"))
    path = renamed if target == "folder" else renamed / "manifest.json"
    assert main(["audit", str(path)]) == AUDIT_OK  # intact under another name: clean
    capsys.readouterr()
    arrow = sorted((renamed / "train").glob("*.arrow"))[0]
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit, same size
    arrow.write_bytes(bytes(data))
    assert main(["audit", str(path)]) == AUDIT_UNREADABLE
    out = " ".join(capsys.readouterr().out.split())
    assert f"train/{arrow.name}: content changed" in out and "prepare the data again" in out

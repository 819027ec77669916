"""Only what lightning_order wrote is ever deleted from a cache folder (issue: a user's folder was lost).

``cache_dir`` (or ``$LIGHTNING_ORDER_CACHE``) may point at a home or project folder: a cleanup
that deleted every ``.tmp-*`` folder older than 6 h there destroyed users' data. Each case below
failed before the fix: the folder or file named was gone after ``prepare_data`` or ``recover()``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from filelock import Timeout

from lightning_order import DataError, OrderedDataModule, OrderedTextClassifier, recover
from lightning_order.data.engine import cache
from lightning_order.ledger import CHECKPOINT_KEY

_OLD = time.time() - cache.STALE_AFTER_S - 3600  # 7 hours ago


def _aged(path: Path) -> Path:
    os.utime(path, (_OLD, _OLD))
    return path


def _users_folder(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("a week of notes")
    (folder / "sub" / "data.csv").write_text("x,y\n1,2\n")
    return _aged(folder)


# Names a user (or another tool) may have, some shaped exactly like ours but without our marker.
USER_NAMES = [
    ".tmp-notes",
    ".tmp-notes-1-deadbeef",
    ".tmp-" + "a" * 32,
    ".tmp-" + "a" * 32 + "-123-deadbeef",  # our exact name pattern, but we never wrote it
    ".tmp-" + "a" * 32 + "-123-deadbeef-copy",
]


@pytest.mark.parametrize("name", USER_NAMES)
def test_a_users_tmp_folder_survives_prepare_data(tmp_path, name):
    users = _users_folder(tmp_path, name)
    lock = tmp_path / ("a" * 32 + ".lock")
    lock.write_text("")  # a lock file beside it is not proof either
    dm = OrderedDataModule(cache_dir=str(tmp_path), demo_size=600, vocab_size=200, max_length=16)
    dm.prepare_data()
    assert (users / "notes.txt").read_text() == "a week of notes"
    assert (users / "sub" / "data.csv").is_file() and lock.is_file()
    assert dm.cache_path.is_dir()


def test_our_own_stale_temp_folder_is_removed_with_its_lock(tmp_path):
    other = "b" * 32
    ours = cache.new_temp_dir(tmp_path, other)
    (ours / "train").mkdir()
    cache.cache_lock(tmp_path, other).acquire()  # made the lock file, as a killed preparer did
    cache.cache_lock(tmp_path, other).release()
    _aged(ours)
    users = _users_folder(tmp_path, ".tmp-notes")
    removed = cache.remove_stale_others(tmp_path, "c" * 32)
    assert removed == [ours] and not ours.exists()
    assert not (tmp_path / f"{other}.lock").exists()  # the lock goes with its folder
    assert users.is_dir()


def test_a_lock_of_a_finished_cache_is_kept(tmp_path):
    other = "b" * 32
    (tmp_path / other).mkdir()  # a finished cache of that configuration still uses its lock
    ours = _aged(cache.new_temp_dir(tmp_path, other))
    cache.cache_lock(tmp_path, other)
    (tmp_path / f"{other}.lock").write_text("")
    assert cache.remove_stale_others(tmp_path, "c" * 32) == [ours]
    assert (tmp_path / f"{other}.lock").exists()


def test_a_lock_removed_while_another_process_waits_still_excludes(tmp_path):
    """Deleting a lock file we hold never lets two processes in (filelock re-checks the inode)."""
    key = "d" * 32
    first = cache.cache_lock(tmp_path, key, timeout=0)
    first.acquire()
    (tmp_path / f"{key}.lock").unlink()
    first.release()
    second, third = cache.cache_lock(tmp_path, key, timeout=0), cache.cache_lock(tmp_path, key, timeout=0)
    second.acquire()
    with pytest.raises(Timeout):
        third.acquire()
    second.release()


def test_our_key_pattern_without_marker_is_not_removed_for_our_key(tmp_path):
    dm = OrderedDataModule(cache_dir=str(tmp_path), demo_size=600, vocab_size=200, max_length=16)
    lookalike = tmp_path / f".tmp-{dm.cache_key}-1-deadbeef"
    (lookalike / "train").mkdir(parents=True)
    (lookalike / "mine.txt").write_text("not the library's")
    dm.prepare_data()
    assert (lookalike / "mine.txt").is_file()


def test_a_folder_in_the_way_of_the_cache_is_refused_not_deleted(tmp_path):
    dm = OrderedDataModule(cache_dir=str(tmp_path), demo_size=600, vocab_size=200, max_length=16)
    blocking = dm.cache_path
    blocking.mkdir()
    (blocking / "thesis.tex").write_text("chapter 1")
    with pytest.raises(DataError, match="did not write") as info:
        dm.prepare_data()
    assert info.value.step == "prepare_data" and str(blocking) in str(info.value)
    assert (blocking / "thesis.tex").read_text() == "chapter 1"


def test_a_temp_folder_needs_a_fingerprint_key(tmp_path):
    with pytest.raises(ValueError, match="32 lowercase hex"):
        cache.new_temp_dir(tmp_path, "notes")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_recover_never_writes_where_the_checkpoint_says(tmp_path, monkeypatch):
    """A checkpoint naming another cache_dir: recover() prepares in the caller's (or default) cache only."""
    victim = tmp_path / "victim"
    users = _users_folder(victim, ".tmp-notes")
    mine = tmp_path / "mine"
    default = tmp_path / "default"
    monkeypatch.setenv(cache.CACHE_ENV, str(default))
    dm = OrderedDataModule(cache_dir=str(mine), demo_size=600, vocab_size=200, max_length=16, seed=0)
    model = OrderedTextClassifier(**dm.dims)
    hparams = {**dict(dm.hparams), "cache_dir": str(victim)}
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "datamodule_hyper_parameters": hparams,
        CHECKPOINT_KEY: {
            "reason": [{"type": "violation", "rule": "fit-before-split"}],
            "model": {"class": f"{OrderedTextClassifier.__module__}.OrderedTextClassifier"},
            "datamodule": {"class": f"{OrderedDataModule.__module__}.OrderedDataModule"},
        },
    }
    path = tmp_path / "plain.ckpt"
    torch.save(checkpoint, path)
    before = sorted(p.relative_to(victim) for p in victim.rglob("*"))

    plan = recover(path)
    assert plan.datamodule.cache_root == default
    assert sorted(p.relative_to(victim) for p in victim.rglob("*")) == before  # untouched
    assert (users / "notes.txt").read_text() == "a week of notes"

    plan = recover(path, cache_dir=mine)
    assert plan.datamodule.cache_root == mine and plan.datamodule.cache_path.is_dir()
    assert sorted(p.relative_to(victim) for p in victim.rglob("*")) == before

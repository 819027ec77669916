"""``lightning_order.checkpoint``: ``plain`` turns what a callback stores into data that loads with ``weights_only=True``;
a distributed checkpoint folder's ``meta.pt`` is refused unless it was written with the shards beside it.

Safe loading through every path that reads a checkpoint: tests/integration/test_checkpoint_safety.py.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
import torch

from lightning_order.checkpoint import (
    SHARDED_META,
    early_checkpoint,
    is_sharded_checkpoint,
    plain,
    read_sharded_meta,
    shards_digest,
    tie_shards,
)
from lightning_order.errors import CheckpointError
from lightning_order.ledger import CHECKPOINT_KEY


def test_plain_turns_anything_into_weights_only_data(tmp_path: Path) -> None:
    value = plain(
        {"p": tmp_path, "t": (1, 2.5, float("inf")), "s": {3, 1}, 4: torch.tensor(2.0), "o": object()}
    )
    assert value["p"] == str(tmp_path) and value["t"] == [1, 2.5, "inf"] and value["s"] == [1, 3]
    assert torch.equal(value["4"], torch.tensor(2.0)) and value["o"].startswith("<object")
    torch.save(value, tmp_path / "v.pt")
    assert torch.load(tmp_path / "v.pt", weights_only=True)["t"] == [1, 2.5, "inf"]


# -- a distributed checkpoint folder: meta.pt tied to the shards written with it (issue #42) -----------
def _folder(root: Path, name: str, shard_bytes: int = 64) -> Path:
    """A folder as Lightning's ModelParallelStrategy saves it: shards, their index, and meta.pt, tied."""
    folder = root / name
    folder.mkdir()
    (folder / ".metadata").write_bytes(f"index of {name} {uuid.uuid4()}".encode())  # torch's names its save
    for rank in range(2):
        (folder / f"__{rank}_0.distcp").write_bytes(b"w" * shard_bytes)
    meta = {"pytorch-lightning_version": "2.6.0", "loops": {}, CHECKPOINT_KEY: {"ledger": None, "run": name}}
    torch.save(meta, folder / SHARDED_META)
    tie_shards(meta, folder)
    return folder


def test_a_tied_folder_reads_back_as_saved(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "a")
    assert is_sharded_checkpoint(folder) and not is_sharded_checkpoint(tmp_path)
    meta = read_sharded_meta(folder)
    assert meta[CHECKPOINT_KEY]["run"] == "a" and meta[CHECKPOINT_KEY]["shards"] == shards_digest(folder)
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []  # replaced atomically


@pytest.mark.parametrize("mix", ["meta-from-another-run", "a-shard-replaced", "a-shard-truncated"])
def test_a_folder_mixing_two_checkpoints_is_one_checkpoint_error(tmp_path: Path, mix: str) -> None:
    a, c = _folder(tmp_path, "a"), _folder(tmp_path, "c")
    if mix == "meta-from-another-run":  # run A's shards, run C's meta.pt: C's data would take A's weights
        shutil.copy(c / SHARDED_META, a / SHARDED_META)
    elif mix == "a-shard-replaced":
        shutil.copy(c / ".metadata", a / ".metadata")
    else:
        (a / "__1_0.distcp").write_bytes(b"w" * 10)
    with pytest.raises(CheckpointError) as caught:
        read_sharded_meta(a)
    message = str(caught.value)
    assert "\n" not in message and f"{a / SHARDED_META} was not written with the shards beside it" in message
    assert "use a checkpoint folder as its save wrote it" in message


@pytest.mark.parametrize("damage", ["truncated", "empty", "a-list", "another-tool"])
def test_a_damaged_or_foreign_meta_pt_is_one_checkpoint_error(tmp_path: Path, damage: str) -> None:
    folder = _folder(tmp_path, "a")
    meta = folder / SHARDED_META
    if damage == "truncated":
        meta.write_bytes(meta.read_bytes()[: meta.stat().st_size // 2])
    elif damage == "empty":
        meta.write_bytes(b"")
    else:
        torch.save([1, 2, 3] if damage == "a-list" else {"step": 3, "model_args": {}}, meta)
    with pytest.raises(CheckpointError) as caught:
        read_sharded_meta(folder)
    assert "\n" not in str(caught.value) and str(meta) in str(caught.value)
    assert early_checkpoint_raises(folder)


def early_checkpoint_raises(folder: Path) -> bool:
    """``early_checkpoint`` (the validator's ``setup``) refuses the folder too, rather than deferring it."""
    try:
        early_checkpoint(folder)
    except CheckpointError:
        return True
    return False


def test_a_folder_saved_before_the_tie_still_reads(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "old")
    meta = torch.load(folder / SHARDED_META, weights_only=True)
    del meta[CHECKPOINT_KEY]["shards"]
    torch.save(meta, folder / SHARDED_META)
    assert read_sharded_meta(folder)[CHECKPOINT_KEY]["run"] == "old"


def test_a_file_a_user_adds_to_the_folder_is_no_shard(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "a")
    (folder / "README.txt").write_text("the run of Tuesday")
    assert read_sharded_meta(folder)[CHECKPOINT_KEY]["run"] == "a"

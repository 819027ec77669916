"""``lightning_order.recovery.emergency``: the pause writes one checkpoint through Lightning's public API.

The pause's entry is merged with what other callbacks put under the same key, the trainer is left
with the callbacks it had, and no module of the package reads a private attribute of the Trainer.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from helpers import ROOT, private_names, quiet_trainer
from pytorch_lightning.demos.boring_classes import BoringModel

from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.recovery import pause
from lightning_order.recovery.emergency import PAUSE_DIR, pause_path


class _Fingerprints(pl.Callback):
    """Puts an entry under our key, as OrderValidator does with the data's fingerprints."""

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {"fingerprints": ["abc"]}


class _PauseAt(pl.Callback):
    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            pause(trainer, self.path, elapsed_s=1.0)


def test_pause_writes_its_entry_beside_the_other_callbacks_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "pause.ckpt"
    callbacks = [_Fingerprints(), _PauseAt(2, path)]
    trainer = quiet_trainer(tmp_path, callbacks, max_steps=10)
    trainer.fit(BoringModel())
    assert trainer.global_step == 2  # stopped at the pause
    assert trainer.callbacks[-2:] == callbacks  # the pause's own callback is gone again
    checkpoint = torch.load(path, weights_only=True)
    entry = checkpoint[CHECKPOINT_KEY]
    assert entry["fingerprints"] == ["abc"] and entry["format"] == "lightning_order.pause"
    assert entry["step"] == 2 and checkpoint["global_step"] == 2
    assert "PauseEntry" not in str(checkpoint.get("callbacks", {}))  # it has no state of its own


def test_no_module_reads_a_private_attribute_of_the_trainer() -> None:
    private = private_names(pl.Trainer)
    read = []
    for module in sorted((ROOT / "lightning_order").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            on_self = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            )
            if isinstance(node, ast.Attribute) and node.attr in private and not on_self:
                read.append(f"{module.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not read, read


def _import_from(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``import lightning_order`` in a fresh interpreter run in ``cwd``, found as the install finds it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the install's own lookup
    code = "import lightning_order as m; assert m.__file__, f'a namespace package at {list(m.__path__)}'"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_default_pause_folder_cannot_shadow_the_package(tmp_path: Path) -> None:
    """Issue #42: ``./lightning_order/`` in the training folder hid an editable install from ``import``."""
    path = pause_path(tmp_path / "run", 20)
    assert path == tmp_path / "run" / PAUSE_DIR / "pause-step20.ckpt"
    assert pause_path(tmp_path, 3, tmp_path / "mine") == tmp_path / "mine" / "pause-step3.ckpt"
    assert importlib.util.find_spec(path.parent.name) is None  # no importable name
    path.parent.mkdir(parents=True)
    (tmp_path / "neutral").mkdir()
    if _import_from(tmp_path / "neutral").returncode != 0:
        pytest.skip("lightning_order is importable here only through PYTHONPATH")
    done = _import_from(path.parent.parent)  # the training folder, the pause folder in it
    assert done.returncode == 0, done.stderr

"""Safe checkpoint loading: nothing a checkpoint holds runs, through every path that reads one
(``Trainer.fit(ckpt_path=...)`` with our callbacks, ``recover()``, ``lightning-order audit``),
and what our callbacks store is plain data that loads with ``weights_only=True``.

``checkpoint.plain`` alone: tests/unit/core/test_checkpoint.py.
"""

from __future__ import annotations

import pathlib
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_order import CheckpointError, OrderValidator, SymptomMonitor, recover
from lightning_order.checkpoint import load_checkpoint
from lightning_order.cli import main
from lightning_order.ledger import CHECKPOINT_KEY, StepLedger
from lightning_order.models import OrderedTextClassifier

DIMS = {"vocab_size": 40, "num_features": 3, "num_classes": 2, "max_length": 8}


class WritesMarker:
    """Unpickling this creates ``path``: any code a pickle names would run just as well."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def _batches(n: int = 16) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    rows = [
        {
            "input_ids": torch.randint(1, DIMS["vocab_size"], (DIMS["max_length"],), generator=g),
            "attention_mask": torch.ones(DIMS["max_length"], dtype=torch.long),
            "features": torch.randn(DIMS["num_features"], generator=g),
            "labels": torch.randint(0, DIMS["num_classes"], (), generator=g),
        }
        for _ in range(n)
    ]
    return torch.utils.data.DataLoader(rows, batch_size=8)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real checkpoint of a run with OrderValidator and SymptomMonitor (and a ledger entry)."""
    root = tmp_path_factory.mktemp("honest")
    saver = ModelCheckpoint(dirpath=root, save_last=True)
    trainer = quiet_trainer(
        root, [OrderValidator(), SymptomMonitor(), saver], max_steps=2, enable_checkpointing=True
    )
    trainer.fit(OrderedTextClassifier(**DIMS), _batches())
    path = Path(saver.last_model_path)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint[CHECKPOINT_KEY] = {**checkpoint.get(CHECKPOINT_KEY, {}), "ledger": StepLedger().state_dict()}
    torch.save(checkpoint, path)
    return path


@pytest.fixture()
def malicious(honest: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The honest checkpoint with a payload that writes a marker file when unpickled."""
    marker = tmp_path / "pwned"
    checkpoint = torch.load(honest, weights_only=True)
    checkpoint[CHECKPOINT_KEY]["model"] = {"class": "lightning_order.models.OrderedTextClassifier"}
    checkpoint["callbacks"]["evil"] = WritesMarker(marker)
    path = tmp_path / "malicious.ckpt"
    torch.save(checkpoint, path)
    return path, marker


def test_our_callbacks_store_only_plain_data(honest: Path) -> None:
    checkpoint = load_checkpoint(honest)  # weights_only=True: refuses anything else
    states = [
        state for key, state in checkpoint["callbacks"].items() if "Validator" in key or "Symptom" in key
    ]
    assert len(states) == 2
    assert set(checkpoint[CHECKPOINT_KEY]) >= {"fingerprints", "ledger"}


def test_the_payload_is_live(malicious: tuple[Path, Path]) -> None:
    # The control: a plain unsafe load runs it (so the tests below prove something).
    path, marker = malicious
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_load_checkpoint_refuses_and_names_what_the_pickle_refers_to(malicious: tuple[Path, Path]) -> None:
    path, marker = malicious
    with pytest.raises(CheckpointError, match=r"refused to load checkpoint .*\(it names \S+\)") as info:
        load_checkpoint(path)
    assert "weights_only=True" in str(info.value) and "trust its source" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("how", ["fit(ckpt_path=...)", "trainer.ckpt_path"])
def test_fit_with_our_callbacks_runs_nothing(malicious: tuple[Path, Path], tmp_path: Path, how: str) -> None:
    path, marker = malicious
    seen_in_setup: list[str | None] = []

    class SeesCkptPath(pl.Callback):
        def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
            seen_in_setup.append(trainer.ckpt_path)

    trainer = quiet_trainer(tmp_path, [OrderValidator(), SymptomMonitor(), SeesCkptPath()], max_steps=4)
    if how == "trainer.ckpt_path":
        trainer.ckpt_path = str(path)  # known in setup: the validator's early resume check reads it
    with pytest.raises(Exception, match="Weights only load failed") as info:  # Lightning's own refusal
        trainer.fit(
            OrderedTextClassifier(**DIMS), _batches(), ckpt_path=str(path) if how.startswith("fit") else None
        )
    assert "Unsupported global" in str(info.value)
    assert seen_in_setup == [str(path) if how == "trainer.ckpt_path" else None]
    assert not marker.exists() and trainer.global_step == 0


def test_recover_runs_nothing(malicious: tuple[Path, Path]) -> None:
    path, marker = malicious
    with pytest.raises(CheckpointError, match="refused to load checkpoint"):
        recover(path, model_cls=OrderedTextClassifier)
    assert not marker.exists()


def test_audit_of_a_checkpoint_runs_nothing(
    malicious: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path, marker = malicious
    assert main(["audit", str(path)]) == 2
    assert "refused to load checkpoint" in capsys.readouterr().out
    assert not marker.exists()


def test_audit_reads_the_ledger_of_an_honest_checkpoint(
    honest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", str(honest)]) == 0
    assert "no violation" in capsys.readouterr().out


def test_recover_imports_no_class_the_checkpoint_names(honest: Path, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    checkpoint = torch.load(honest, weights_only=True)
    # A name that, imported and called with the checkpoint's hyper-parameters, would write a file.
    checkpoint[CHECKPOINT_KEY]["model"] = {"class": "pathlib.Path.touch"}
    checkpoint["hyper_parameters"] = {"self": str(marker)}
    path = tmp_path / "names.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"'pathlib.Path.touch'.*pass model_cls=touch"):
        recover(path, path="resume")
    assert not marker.exists()


def test_recover_knows_this_packages_own_classes_and_asks_for_others(honest: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="records no model class: pass model_cls="):
        recover(honest, path="resume")  # a checkpoint of a run that never paused names no class
    checkpoint = torch.load(honest, weights_only=True)
    checkpoint[CHECKPOINT_KEY]["model"] = {"class": "lightning_order.models.OrderedTextClassifier"}
    torch.save(checkpoint, tmp_path / "own.ckpt")
    plan = recover(tmp_path / "own.ckpt", path="resume")
    assert isinstance(plan.model, OrderedTextClassifier)
    assert torch.equal(plan.model.embedding.weight, checkpoint["state_dict"]["embedding.weight"])


# -- a checkpoint that cannot be read is refused in one line, through every path -----------------
@pytest.fixture(params=["empty", "truncated", "garbage", "missing"])
def unreadable(request: pytest.FixtureRequest, honest: Path, tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / f"{request.param}.ckpt"
    if request.param == "empty":
        path.write_bytes(b"")
    elif request.param == "truncated":
        path.write_bytes(honest.read_bytes()[: honest.stat().st_size // 2])
    elif request.param == "garbage":
        path.write_bytes(b"these are not the weights you are looking for\n" * 100)
    words = {"empty": "is empty", "missing": "does not exist"}.get(request.param, "not a readable checkpoint")
    return path, words


def test_load_checkpoint_names_the_file_and_what_is_wrong(unreadable: tuple[Path, str]) -> None:
    path, words = unreadable
    with pytest.raises(CheckpointError, match=words) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_fit_from_an_unreadable_checkpoint_stops_before_any_step(
    unreadable: tuple[Path, str], tmp_path: Path
) -> None:
    path, words = unreadable
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=2)
    trainer.ckpt_path = str(path)  # known in setup: refused there, in one line, before Lightning reads it
    # A missing file is Lightning's own one line (FileNotFoundError naming it), kept as users catch it.
    expected = (FileNotFoundError, "not found") if "missing" in path.name else (CheckpointError, words)
    with pytest.raises(expected[0], match=expected[1]) as info:
        trainer.fit(OrderedTextClassifier(**DIMS), _batches())
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert trainer.global_step == 0


def test_recover_and_audit_refuse_an_unreadable_checkpoint_in_one_line(
    unreadable: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, words = unreadable
    with pytest.raises(CheckpointError, match=words):
        recover(path, model_cls=OrderedTextClassifier)
    assert main(["audit", str(path)]) == 2
    out = capsys.readouterr()
    said = out.out + out.err
    assert (words in said or "no such file" in said) and str(path) in said and "Traceback" not in said

"""What a run says about itself (#26): ``fit --help`` names the way to the other pipelines' options, a
fit cut short before its first validation validates once (so an LM prints its perplexity), and the
summary names only folders that exist.

The cut-short LM fit end to end: tests/integration/test_command_line.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import fsspec
import pytest

from lightning_order.cli import main
from lightning_order.cli.console import locations, never_validated, one_line

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["fit", "--help"],
            "For causal language modelling: lightning-order fit --config configs/lm-demo.yaml --help",
        ),
        (["validate", "--help"], "--model lightning_order.OrderedCausalLM --help"),
        (
            ["fit", "--model", "lightning_order.OrderedCausalLM", "--help"],
            "For text classification: lightning-order fit --config configs/demo.yaml --help",
        ),
    ],
)
def test_help_without_a_config_says_how_to_see_the_other_pipelines_options(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert expected in one_line(capsys.readouterr().out)


def _trainer(**overrides: object) -> SimpleNamespace:
    fields = {"interrupted": False, "limit_val_batches": 1.0, "callback_metrics": {"train_loss": 1.0}}
    return SimpleNamespace(**{**fields, **overrides})


DATA = SimpleNamespace(val_dataloader=lambda: [])


@pytest.mark.parametrize(
    ("trainer", "datamodule", "expected"),
    [
        (_trainer(), DATA, True),  # stopped by max_steps before the scheduled validation
        (_trainer(callback_metrics={"train_loss": 1.0, "val_loss": 2.0}), DATA, False),
        (_trainer(interrupted=True), DATA, False),
        (_trainer(limit_val_batches=0), DATA, False),
        (_trainer(), SimpleNamespace(), False),  # no validation data
    ],
)
def test_a_fit_that_never_validated_is_told_apart(
    trainer: object, datamodule: object, expected: bool
) -> None:
    assert never_validated(trainer, datamodule) is expected  # type: ignore[arg-type]


def test_the_summary_names_only_folders_that_exist(tmp_path: Path) -> None:
    logs = tmp_path / "lightning_logs" / "version_0"
    logs.mkdir(parents=True)
    checkpoints = tmp_path / "checkpoints"  # named by ModelCheckpoint, nothing saved yet
    trainer = SimpleNamespace(
        checkpoint_callback=SimpleNamespace(best_model_path="", last_model_path="", dirpath=str(checkpoints)),
        logger=SimpleNamespace(log_dir=str(logs)),
        ckpt_path=None,
    )
    datamodule = SimpleNamespace(cache_path=tmp_path / "cache" / "gone")
    assert locations(datamodule, trainer, "fit") == [("logs and config", str(logs))]  # type: ignore[arg-type]
    checkpoints.mkdir()
    assert ("checkpoints", str(checkpoints)) in locations(datamodule, trainer, "fit")  # type: ignore[arg-type]


def test_the_summary_names_an_fsspec_log_folder_that_exists(tmp_path: Path) -> None:
    """#42 item 9: a ``memory://`` (as an ``s3://``) folder is asked of its storage, not of the local disk."""
    fs = fsspec.filesystem("memory")
    logs = f"memory://{tmp_path.name}/lightning_logs/version_0"
    trainer = SimpleNamespace(checkpoint_callback=None, logger=SimpleNamespace(log_dir=logs), ckpt_path=None)
    assert locations(SimpleNamespace(), trainer, "fit") == []  # type: ignore[arg-type]
    fs.pipe_file(f"{logs}/config.yaml", b"trainer: {}")
    try:
        assert locations(SimpleNamespace(), trainer, "fit") == [("logs and config", logs)]  # type: ignore[arg-type]
    finally:
        fs.rm(f"memory://{tmp_path.name}", recursive=True)

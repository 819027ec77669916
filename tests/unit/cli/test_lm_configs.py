"""configs/lm-*.yaml: documented, parsed and instantiated by the LM CLI, and the main job end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderValidator, SymptomMonitor
from lightning_order.cli import OrderCLI, OrderLMCLI, descriptor_of_command, main

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
LM_CONFIGS = sorted(CONFIGS.glob("lm-*.yaml"))


def _small(tmp_path: Path) -> list[str]:
    return [
        "--data.max_documents=200",
        "--data.vocab_size=300",
        "--data.block_size=16",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.default_root_dir",
        str(tmp_path),
    ]


def test_both_lm_configs_exist() -> None:
    assert [p.name for p in LM_CONFIGS] == ["lm-ddp.yaml", "lm-demo.yaml"]


@pytest.mark.parametrize("config", LM_CONFIGS, ids=lambda p: p.name)
def test_lm_config_opens_with_a_comment(config: Path) -> None:
    lines = config.read_text().splitlines()
    assert lines[0].startswith(f"# {config.name}:")
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "Run" in header and "lightning-order fit --config configs/" in header and "verride" in header


@pytest.mark.parametrize("config", LM_CONFIGS, ids=lambda p: p.name)
def test_lm_config_parses_and_instantiates(config: Path, tmp_path: Path) -> None:
    descriptor = descriptor_of_command(["--config", str(config)])
    assert descriptor.name == "lm"
    cli = OrderCLI(args=["--config", str(config), *_small(tmp_path)], run=False, pipeline=descriptor)
    assert isinstance(cli.datamodule, OrderedLMDataModule)
    assert isinstance(cli.model, OrderedCausalLM)
    for dim in ("vocab_size", "padded_vocab_size", "block_size"):
        assert cli.model.hparams[dim] == cli.datamodule.dims[dim]
    assert any(isinstance(cb, OrderValidator) for cb in cli.trainer.callbacks)
    assert any(isinstance(cb, SymptomMonitor) for cb in cli.trainer.callbacks)


def test_the_command_line_names_its_pipeline() -> None:
    assert descriptor_of_command(["--config", str(CONFIGS / "demo.yaml")]).name == "standard"
    assert descriptor_of_command(["--model", "lightning_order.OrderedCausalLM"]).name == "lm"
    assert (
        descriptor_of_command(["--model.class_path=lightning_order.models.causal_lm.OrderedCausalLM"]).name
        == "lm"
    )
    assert descriptor_of_command([]).name == "standard"
    assert OrderLMCLI.pipeline_name == "lm"  # the LM preset of the one OrderCLI


def test_a_linked_dim_set_in_the_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = [
        "fit",
        "--config",
        str(CONFIGS / "lm-demo.yaml"),
        *_small(tmp_path),
        "--model.init_args.block_size=8",
    ]
    assert main(args) == 2
    assert "model.init_args.block_size=8" in capsys.readouterr().err


@pytest.mark.slow
def test_lm_main_job_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The main job on a small corpus: the ledger, no violation, the perplexity and a continuation."""
    args = [*_small(tmp_path), "--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1"]
    assert main(["prepare", "--config", str(CONFIGS / "lm-demo.yaml"), *args]) == 0
    assert "✓ the order is correct" in capsys.readouterr().out
    assert main(["fit", "--config", str(CONFIGS / "lm-demo.yaml"), *args]) == 0
    out = capsys.readouterr().out
    for expected in (
        "the ledger",
        "✓ the order is correct",
        "validation perplexity:",
        "sampled continuation",
    ):
        assert expected in out
    for step in ("dedup", "pack", "shard", "init_model", "train", "evaluate"):
        assert f"│ {step}" in out

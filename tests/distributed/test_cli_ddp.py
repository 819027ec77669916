"""``lightning-order fit --config configs/ddp.yaml``: the DDP config on two CPU processes (gloo), as a user runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT, TINY, fit_command


@pytest.mark.slow
def test_fit_ddp_config_on_two_cpu_processes(tmp_path: Path) -> None:
    proc = fit_command(tmp_path, ROOT / "configs" / "ddp.yaml", *TINY, cwd=tmp_path)
    assert proc.stdout.count("final metrics") == 1  # the summary comes from rank 0 only
    assert "shard [rank 0]" in proc.stdout and "the order is correct" in proc.stdout


@pytest.mark.slow
def test_fit_the_lm_demo_sharded_with_model_parallel_strategy_on_two_cpu_processes(tmp_path: Path) -> None:
    """``--config configs/lm-sharded.yaml``: FSDP2 on 2 processes (issue #36)."""
    small = ["--data.max_documents=300", "--trainer.max_steps=6", "--trainer.check_val_every_n_epoch=1"]
    proc = fit_command(tmp_path, ROOT / "configs" / "lm-sharded.yaml", *small, cwd=tmp_path)
    assert proc.stdout.count("final metrics") == 1
    assert "shard [rank 0]" in proc.stdout and "the order is correct" in proc.stdout
    assert "validation perplexity" in proc.stdout
    assert "no sampled continuation: the model is sharded across ranks" in proc.stdout

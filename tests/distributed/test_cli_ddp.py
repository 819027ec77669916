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

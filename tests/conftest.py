"""Shared pytest set-up: quiet, deterministic, CPU only."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

warnings.filterwarnings("ignore", message=".*does not have many workers.*")


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root holding one prepared tiny demo pipeline, made by `lightning-order prepare`."""
    from helpers import DEMO, TINY

    from lightning_order.cli import main

    root = tmp_path_factory.mktemp("cache")
    assert main(["prepare", "--config", DEMO, *TINY, "--data.cache_dir", str(root)]) == 0
    return root

"""Shared pytest set-up: quiet, deterministic, CPU only, and no cache outside the session's temp folder.

The tests mirror the package (``unit/<package folder>/``), with ``integration/`` (``Trainer.fit``
and the command end to end), ``distributed/`` (real DDP and multi-process runs, their scripts in
``distributed/ddp_scripts/``) and ``benchmarks/`` (the tests of ``benchmarks/*.py``) beside it.
Shared support lives here, in ``tests/``, on the import path (``pythonpath`` in pyproject.toml):
``helpers``, ``launching``, ``ddp_utils``, ``orders``, ``handwritten``, ``nanogpt``, ``label_data``, ``resumes``, ``s3_server`` and
``golden/``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# One intra-op thread: the models here are tiny, so a pool only spins (measured: the monitor,
# validator and LM lab tests 8 % faster), and the two ranks of a DDP test (which inherit this
# environment) no longer oversubscribe the two cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def pytest_configure(config: pytest.Config) -> None:
    """torch may already be imported (a plugin): set its pool too."""
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(autouse=True)
def seeded_random_state() -> None:
    """Every test starts from one random state (``random``, numpy, torch), whatever ran before it.

    A shuffled loader's first batch, a model's initial weights and a sampled row then depend on
    the test alone, never on which tests its process ran first: the outcome is the same serially,
    run alone, or with the suite split over workers (``-n``).
    """
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$LIGHTNING_ORDER_CACHE`` for the whole session: a temp folder, so no test writes ``~/.cache``.

    Set in ``os.environ`` (not per test), so DDP scripts and commands started in subprocesses
    inherit it; a test that sets its own with ``monkeypatch.setenv`` gets this one back after it.
    """
    root = tmp_path_factory.mktemp("lightning_order_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LIGHTNING_ORDER_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache root holding one prepared tiny demo pipeline, made by `lightning-order prepare`."""
    from helpers import DEMO, TINY

    from lightning_order.cli import main

    root = tmp_path_factory.mktemp("cache")
    assert main(["prepare", "--config", DEMO, *TINY, "--data.cache_dir", str(root)]) == 0
    return root


@pytest.fixture(scope="session")
def resume_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the resume tests' tiny DataModules (``tests/resumes.py``): each is prepared once a session."""
    return tmp_path_factory.mktemp("resume-cache")


# The S3 API server of the object-storage tests (tests/s3_server.py): fixtures s3_server,
# s3_bucket and own_s3_server. moto and s3fs are imported only when a test asks for one.
from s3_server import own_s3_server, s3_bucket, s3_server  # noqa: E402, F401

"""A weighted mixture under a Trainer (issue #34, item 5): the validator proves the shares before step 1,
``mixture-off-weight`` when they stray beyond the tolerance, and a run resumed mid-epoch reads exactly
the batches of the uninterrupted run (the mixed order is a train split like any other).

The data side: tests/unit/data/lm/test_mixture.py; the pure check: tests/unit/checks/test_mixture.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import quiet_trainer
from mixtures import mixture_dm, write_sources
from pytorch_lightning.callbacks import ModelCheckpoint
from resumes import BatchHashes, model

from lightning_order import OrderError, OrderValidator

pytestmark = pytest.mark.slow
#: About 18 global batches an epoch of the mixed train blocks.
OPTIONS = {"batch_size": 128, "num_workers": 2}
TRAIN = {"max_epochs": 2, "limit_val_batches": 1, "enable_checkpointing": True}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mixture")
    write_sources(folder)
    return folder


@pytest.fixture(scope="module")
def reference(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted run of 2 epochs on the mixture, checkpointed after every step; its batches."""
    root, cache = tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("cache")
    dm = mixture_dm(corpus, cache, **OPTIONS)
    hashes, validator = BatchHashes(), OrderValidator()
    every = ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}")
    quiet_trainer(root, [validator, hashes, every], **TRAIN).fit(model("lm", dm), dm)
    steps = len(hashes.batches) // 2
    return {
        "root": root,
        "cache": cache,
        "hashes": hashes.hashes(),
        "violations": validator.violations,
        "steps": steps,
    }


def test_a_mixture_at_its_weights_trains_with_no_violation(reference: dict[str, Any]) -> None:
    assert reference["violations"] == [] and reference["steps"] >= 10


@pytest.mark.parametrize("stop", ["mid-first-epoch", "mid-second-epoch"])
def test_a_mixture_resumed_mid_epoch_reads_the_batches_of_the_uninterrupted_run(
    corpus: Path, reference: dict[str, Any], stop: str
) -> None:
    root, step = reference["root"], 5 if stop == "mid-first-epoch" else reference["steps"] + 3
    dm, hashes, validator = mixture_dm(corpus, reference["cache"], **OPTIONS), BatchHashes(), OrderValidator()
    trainer = quiet_trainer(root, [validator, hashes], **TRAIN)
    trainer.fit(model("lm", dm), dm, ckpt_path=str(root / "ckpt" / f"step={step}.ckpt"))
    assert hashes.hashes() == reference["hashes"][step:]  # no batch replayed or skipped
    assert validator.violations == []


def test_shares_beyond_the_tolerance_are_mixture_off_weight_before_step_1(
    corpus: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    # The served epoch holds 0.7 / 0.3 to a fraction of a point, never exactly: a zero tolerance refuses it.
    dm = mixture_dm(corpus, reference["cache"], mixture_tolerance=0.0, **OPTIONS)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3, limit_val_batches=0)
    with pytest.raises(OrderError) as err:
        trainer.fit(model("lm", dm), dm)
    assert err.value.rules == ["mixture-off-weight"] and trainer.global_step == 0
    assert "source 'web': weight 70.00%" in str(err.value) and "mixture_tolerance" in str(err.value)

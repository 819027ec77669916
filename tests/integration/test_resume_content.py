"""Resume on re-tokenized data with zero glue (issue #37, item 7): ``resume-data-changed``.

nanoGPT's shape (tests/nanogpt.py: ``train.bin`` / ``val.bin`` and a ``tokenizer.json``, no
lightning_order line): a run is trained and checkpointed; the same documents are then encoded
again with another BPE of the same size (the embedding table fits, nothing crashes) and the run
resumed: the validator names the tokenizer and both splits before the weights are restored.
Resumed on the unchanged files it is silent and trains on. The pure check:
tests/unit/checks/test_resume_content.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import quiet_trainer
from nanogpt import VOCAB, BinData, TinyGPT, corpus, encode, prepare, split, train_tokenizer, write_bin

from lightning_order import OrderError, OrderValidator


def _fit(folder: Path, epochs: int, ckpt_path: Path | None = None, save: Path | None = None) -> tuple:
    """``epochs`` epochs of 2 steps (a checkpoint saved after fit lies at an epoch boundary)."""
    validator = OrderValidator()
    trainer = quiet_trainer(
        folder, [validator], max_epochs=epochs, limit_train_batches=2, limit_val_batches=1
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(TinyGPT(VOCAB), BinData(folder), ckpt_path=ckpt_path)
    if save is not None:
        trainer.save_checkpoint(save)
    return trainer, validator


def _retokenize(folder: Path) -> None:
    """The same documents encoded with a BPE of the same size trained on another corpus."""
    train, val = split(corpus())
    tokenizer = train_tokenizer(list(corpus(seed=1)), VOCAB)
    assert tokenizer.get_vocab_size() == VOCAB
    tokenizer.save(str(folder / "tokenizer.json"))
    write_bin(folder / "train.bin", encode(tokenizer, train), np.uint16)
    write_bin(folder / "val.bin", encode(tokenizer, val), np.uint16)


@pytest.fixture()
def trained(tmp_path: Path) -> tuple[Path, Path]:
    folder, checkpoint = tmp_path / "data", tmp_path / "run.ckpt"
    prepare(folder)
    _fit(folder, 1, save=checkpoint)
    return folder, checkpoint


def test_a_resume_on_data_re_tokenized_at_the_same_size_is_resume_data_changed(trained) -> None:
    folder, checkpoint = trained
    _retokenize(folder)
    with pytest.raises(OrderError) as err:
        _fit(folder, 2, ckpt_path=checkpoint)
    assert err.value.rules == ["resume-data-changed"]
    (violation,) = err.value.violations
    assert violation.details["changed"] == ["tokenizer", "train", "val"]
    assert "the tokenizer changed" in violation.message and "the train split holds" in violation.message
    assert "same tokenizer.json" in violation.fix


def test_a_resume_on_unchanged_data_is_silent_and_trains_on(trained) -> None:
    folder, checkpoint = trained
    trainer, validator = _fit(folder, 2, ckpt_path=checkpoint)
    assert validator.violations == [] and trainer.global_step == 4
    assert set(validator.content["splits"]) == {"train", "val"} and validator.content["tokenizer"]

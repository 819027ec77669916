"""#37 item 5 through a Trainer, zero glue: a BPE trained on the raw pages of a nanoGPT-style pipeline
(the cleaned text encoded) is stopped before step 1 with ``vocab-before-clean``; trained on the
cleaned train text, or elsewhere (a supplied tokenizer), the run trains.

The check (:func:`~lightning_order.callbacks.validator.lm.tokenizer_fit_violations`) is
called from the validator's LM gathering (``callbacks/validator/lm.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import quiet_trainer
from markup import prepare_fits
from nanogpt import BinData, TinyGPT

from lightning_order import OrderError, OrderValidator


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return prepare_fits(tmp_path_factory.mktemp("tokenizer_fit_glue"))


def _fit(folder: Path) -> tuple[OrderError | None, int]:
    dm = BinData(folder)
    dm.setup("fit")
    trainer = quiet_trainer(None, [OrderValidator()], max_steps=1, limit_val_batches=1)
    try:
        trainer.fit(TinyGPT(len(dm.tokenizer)), dm)
    except OrderError as err:
        return err, trainer.global_step
    return None, trainer.global_step


def test_a_tokenizer_trained_before_cleaning_is_stopped_before_step_1(folders: dict[str, Path]) -> None:
    error, steps = _fit(folders["raw"])
    assert error is not None and steps == 0
    assert [v.rule for v in error.violations] == ["vocab-before-clean"]


@pytest.mark.parametrize("fit_on", ["clean", "elsewhere"])
def test_correct_tokenizers_train(folders: dict[str, Path], fit_on: str) -> None:
    error, steps = _fit(folders[fit_on])
    assert error is None and steps == 1

"""Zero glue on a hand-written nanoGPT-style LM pipeline (#26): ``OrderValidator()`` and nothing else.

The datamodule and model are tests/nanogpt.py's: ``train.bin`` / ``val.bin`` memmaps read as
random windows, ``dm.tokenizer`` a ``transformers`` ``PreTrainedTokenizerFast``, a tiny
``GPT2LMHeadModel`` built from a config. Each classic bug is caught before step 1 with its
rule code; the correct pipeline is silent. The same under 2-rank DDP:
tests/distributed/test_lm_zero_glue_ddp.py (correct, pad-added, no-eos).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import quiet_trainer
from nanogpt import BinData, LatePadData, PadUsedData, TinyGPT, prepare

from lightning_order import OrderError, OrderValidator


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One offline preparation per kind of data: correct, without end-of-text, with 19 % twins."""
    root = tmp_path_factory.mktemp("nanogpt")
    variants = {"correct": {}, "no-eos": {"eos": False}, "twins": {"twins": 0.19}}
    for name, options in variants.items():
        prepare(root / name, **options)
    return {name: root / name for name in variants}


def _fit(dm: BinData, model: TinyGPT) -> tuple[OrderValidator, OrderError | None, int]:
    validator = OrderValidator()
    trainer = quiet_trainer(None, [validator], max_steps=1, limit_val_batches=1)
    try:
        trainer.fit(model, dm)
    except OrderError as err:
        return validator, err, trainer.global_step
    return validator, None, trainer.global_step


def test_the_correct_pipeline_is_silent_and_trains(folders):
    dm = BinData(folders["correct"])
    dm.setup("fit")
    validator, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is None and validator.violations == [] and steps == 1


@pytest.mark.parametrize("data_cls", [LatePadData, PadUsedData], ids=["pad-added", "pad-used"])
def test_a_pad_token_added_after_the_model_was_sized_is_caught_with_the_hf_fix(folders, data_cls):
    dm = data_cls(folders["correct"])
    dm.setup("fit")
    model = TinyGPT(dm.tokenizer.vocab_size)  # vocab_size leaves added tokens out: 512 rows, 513 tokens
    _, error, steps = _fit(dm, model)
    assert error is not None and steps == 0
    # The pad id in the batches (pad-used) is also beyond the table: init-before-data, as before #26.
    assert error.rules == ["vocab-changed-after-init"] or error.rules == [
        "init-before-data",
        "vocab-changed-after-init",
    ]
    assert "513" in str(error) and all("resize_token_embeddings" in v.fix for v in error.violations)


def test_a_token_added_after_the_model_was_built_is_caught(folders):
    dm = BinData(folders["correct"])
    dm.setup("fit")
    model = TinyGPT(len(dm.tokenizer))
    dm.tokenizer.add_special_tokens({"pad_token": "<pad>"})  # after the model: no resize
    _, error, steps = _fit(dm, model)
    assert error is not None and error.rules == ["vocab-changed-after-init"] and steps == 0


def test_blocks_without_end_of_text_are_caught_at_block_size_32(folders):
    dm = BinData(folders["no-eos"])
    dm.setup("fit")
    assert dm.tokenizer.eos_token_id is None  # the id comes from the tokenizer's declared special token
    _, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["pack-without-eos"] and steps == 0
    assert "512 sampled blocks" in str(error) and "interval" in str(error)


def test_validation_documents_with_a_train_twin_are_caught(folders):
    dm = BinData(folders["twins"])
    dm.setup("fit")
    _, error, steps = _fit(dm, TinyGPT(len(dm.tokenizer)))
    assert error is not None and error.rules == ["train-val-overlap"] and steps == 0
    estimate = error.violations[0].details["estimate"]
    assert estimate["hits"] >= estimate["min_hits"] and estimate["interval"][0] > 0.01

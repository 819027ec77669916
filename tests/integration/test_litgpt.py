"""Issue #48's table as tests: litgpt's real data modules under ``OrderValidator()`` and nothing else.

``JSON`` and ``Alpaca`` (``SFTDataset``, ``get_sft_collate_fn``, the Alpaca prompt style),
``TextFiles`` and ``TinyStories`` (litdata's ``StreamingDataset`` over chunks ``optimize`` wrote
from local shards), a tiny ``litgpt.model.GPT`` trained with litgpt's ``chunked_cross_entropy``, a
BPE read by litgpt's ``Tokenizer`` from a checkpoint folder (tests/litgpt_pipelines.py). Every
correct run is silent and trains its step; every bug is stopped before step 1 with the rule that
names its cause.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("litgpt")
pytest.importorskip("litdata")

import lightning.pytorch as L  # litgpt's data modules are lightning.pytorch's
from helpers import quiet_trainer
from litgpt.data import JSON, Alpaca, TextFiles, TinyStories
from litgpt.tokenizer import Tokenizer
from litgpt_pipelines import (
    LitGPT,
    checkpoint_folder,
    instructions,
    pretraining_shards,
    write_json,
)

from lightning_order import OrderError, OrderValidator
from lightning_order.fingerprints import is_tokenizer, tokenizer_fingerprint

VOCAB = 512  # the BPE's size, and the model's padded_vocab_size
# Alpaca's template and an instruction take 91 to 102 tokens of this BPE: cut at 95, three rows in
# four keep no answer; at 40 every row is the template's first 60 tokens.
INSIDE_PROMPTS, INSIDE_TEMPLATE = 95, 40
BLOCK = 64  # the pretraining runs' max_seq_length


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer(checkpoint_folder(tmp_path_factory.mktemp("checkpoints") / "bpe-512", VOCAB))


def _fit(dm: L.LightningDataModule, model: LitGPT) -> tuple[OrderValidator, OrderError | None, int]:
    validator = OrderValidator()
    trainer = quiet_trainer(None, [validator], ns=L, max_steps=1, limit_val_batches=1)
    try:
        trainer.fit(model, dm)
    except OrderError as err:
        return validator, err, trainer.global_step
    return validator, None, trainer.global_step


def _sft(
    folder: Path, tokenizer: Tokenizer, rows: list[dict], *, val: list[dict] | None = None, mask: bool = False,
    max_seq_length: int = 1024, split: float = 0.1,
) -> JSON:  # fmt: skip
    """litgpt's ``JSON`` over ``rows`` (one file split by ``val_split_fraction``, or train.json + val.json)."""
    if val is None:
        dm = JSON(write_json(folder / "data.json", rows), mask_prompt=mask, val_split_fraction=split, num_workers=0)
    else:
        write_json(folder / "train.json", rows)
        write_json(folder / "val.json", val)
        dm = JSON(folder, mask_prompt=mask, num_workers=0)
    dm.connect(tokenizer, batch_size=4, max_seq_length=max_seq_length)
    return dm


@pytest.mark.parametrize("mask", [False, True], ids=["mask_prompt=False", "mask_prompt=True"])
def test_correct_json_sft_is_silent_and_trains(tmp_path, tokenizer, mask):
    validator, error, steps = _fit(_sft(tmp_path, tokenizer, instructions(), mask=mask), LitGPT(VOCAB))
    assert error is None and validator.violations == [] and steps == 1


def test_correct_long_form_sft_is_silent_though_rows_are_longer_than_the_vocabulary(tmp_path, tokenizer):
    # Rows of up to 3 000+ tokens, a vocabulary of 512: token_counts["raw_plus_prompt_template"]
    # is a row's length, not a token id (it gave a false init-before-data).
    dm = _sft(tmp_path, tokenizer, instructions(long_form=True), max_seq_length=-1)
    validator, error, steps = _fit(dm, LitGPT(VOCAB, block_size=4096))
    assert error is None and validator.violations == [] and steps == 1


def test_alpaca_on_a_local_file_is_silent_and_trains(tmp_path, tokenizer):
    (tmp_path / "alpaca.json").write_text(json.dumps(instructions()))
    dm = Alpaca(download_dir=tmp_path, file_name="alpaca.json", val_split_fraction=0.1, num_workers=0)
    dm.connect(tokenizer, batch_size=4, max_seq_length=1024)
    validator, error, steps = _fit(dm, LitGPT(VOCAB))
    assert error is None and validator.violations == [] and steps == 1


@pytest.mark.parametrize("case", ["val.json is train.json", "rows repeated 3x then split"])
def test_validation_rows_that_are_train_rows_are_stopped(tmp_path, tokenizer, case):
    rows = instructions()
    if case == "val.json is train.json":
        dm = _sft(tmp_path, tokenizer, rows, val=rows)
    else:
        dm = _sft(tmp_path, tokenizer, rows * 3, split=0.2)
    _, error, steps = _fit(dm, LitGPT(VOCAB))
    assert error is not None and steps == 0 and error.rules == ["train-val-overlap"]


def test_prompts_longer_than_max_seq_length_are_stopped_as_rows_without_target(tmp_path, tokenizer):
    dm = _sft(tmp_path, tokenizer, instructions(), mask=True, max_seq_length=INSIDE_PROMPTS)
    _, error, steps = _fit(dm, LitGPT(VOCAB))
    assert error is not None and steps == 0 and error.rules == ["rows-without-target"]
    # Read off the whole targets (chunked_cross_entropy's pieces joined): 3 of the batch's 4 rows.
    assert error.violations[0].details["empty_rows"] == 3 and error.violations[0].details["rows"] == 4


def test_prompts_longer_than_max_seq_length_trained_unmasked_are_stopped_as_rows_without_target(tmp_path, tokenizer):
    # mask_prompt=False: every row has targets (its prompt), so step 1 sees no empty row; read again
    # with the prompt masked, the rows cut inside their prompt keep none of their answer.
    rows = instructions()
    dm = _sft(tmp_path, tokenizer, rows, mask=False, max_seq_length=INSIDE_PROMPTS)
    _, error, steps = _fit(dm, LitGPT(VOCAB))
    assert error is not None and steps == 0 and error.rules == ["rows-without-target"]
    (violation,) = error.violations
    assert "mask_prompt=False" in violation.message and f"max_seq_length={INSIDE_PROMPTS}" in violation.message
    assert 0 < violation.details["without_answer"] <= violation.details["rows"] == min(64, int(len(rows) * 0.9))


@pytest.mark.parametrize("mask", [False, True], ids=["mask_prompt=False", "mask_prompt=True"])
def test_max_seq_length_inside_the_template_is_stopped_naming_rows_cut_alike(tmp_path, tokenizer, mask):
    # Every row is the template's first 40 tokens: every validation row has a train twin, and the
    # message names rows cut alike by max_seq_length, not a leak to deduplicate.
    dm = _sft(tmp_path, tokenizer, instructions(), mask=mask, max_seq_length=INSIDE_TEMPLATE)
    _, error, steps = _fit(dm, LitGPT(VOCAB))
    assert error is not None and steps == 0 and error.rules == ["train-val-overlap"]
    (violation,) = error.violations
    assert "shorter than the prompt template" in violation.message and "raise max_seq_length" in violation.fix


def test_a_model_smaller_than_the_tokenizer_is_stopped(tmp_path, tokenizer):
    _, error, steps = _fit(_sft(tmp_path, tokenizer, instructions()), LitGPT(256))
    # The tokenizer, now read, has more tokens than the table: vocab-changed-after-init joins it.
    assert error is not None and steps == 0 and error.rules[0] == "init-before-data"
    assert set(error.rules) <= {"init-before-data", "vocab-changed-after-init"}


def test_litgpt_tokenizer_is_read_as_a_tokenizer(tokenizer):
    assert is_tokenizer(tokenizer) and tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(tokenizer.processor)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> dict[str, Path]:
    """``TextFiles``' folder of ``.txt`` files and ``TinyStories``' ``TinyStories_all_data/*.json``,
    each optimized into ``train/`` and ``val/`` by litgpt's own ``tokenize`` (the first file: val)."""
    return pretraining_shards(tmp_path_factory.mktemp("pretraining"), tokenizer, BLOCK)



@pytest.mark.parametrize("module", ["TextFiles", "TinyStories"])
def test_pretraining_on_litdata_shards_is_silent_and_trains(shards, tokenizer, module):
    dm = TextFiles(shards[module], num_workers=0) if module == "TextFiles" else TinyStories(shards[module], num_workers=0)
    dm.connect(tokenizer, batch_size=4, max_seq_length=BLOCK)
    validator, error, steps = _fit(dm, LitGPT(VOCAB, block_size=BLOCK, pretrain=True))
    assert error is None and validator.violations == [] and steps == 1

"""Issue #43, "bugs that train silently", the last three: each planted with zero glue
(``Trainer(callbacks=[OrderValidator()])`` and no other line of ours) and stopped before step 1
with the rule that names it, beside a correct twin that stays silent and trains.

1. A Megatron-style indexed dataset (tests/corpus_shapes.py: ``.bin`` tokens and ``.idx`` document
   offsets per split, ``GPTDataset`` windows, its own masked loss, the loaders passed to
   ``Trainer.fit``) re-tokenized with another BPE of the same size, and the run resumed from its
   checkpoint: ``resume-data-changed`` (the content sample of the loaders, no datamodule).
2. A BPE trained on the raw HTML pages, the cleaned text encoded with it, in the run_clm and
   nanoGPT shapes on real text (the standard library's docstrings): ``vocab-before-clean``.
3. ``tokenizer(..., truncation=True)`` at ``model_max_length`` before run_clm's ``group_texts``,
   the context longer than a block (no truncated document fits one row), tokenized in worker
   processes as run_clm's ``preprocessing_num_workers`` does (the tokenizer in use never truncated
   itself): ``documents-truncated``, from documents read across consecutive rows.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpus_shapes import (
    BATCH,
    BLOCK,
    EOS,
    GPTDataset,
    IndexedDataset,
    MaskedLoss,
    split_texts,
    tiny_llama,
)
from helpers import quiet_trainer
from markup import clean as strip_markup
from markup import to_html
from nanogpt import BinData, TinyGPT, encode, train_tokenizer, write_bin
from nanogpt import corpus as prose
from run_clm import ClmData, ClmModel, group_texts, train_bpe
from torch.utils.data import DataLoader

from lightning_order import OrderError, OrderValidator


# -- 1. a re-tokenized Megatron-style indexed dataset, resumed -------------------------------------
def _megatron_loaders(folder: Path, bpe: Any) -> dict[str, DataLoader]:
    """Megatron's preprocessing of each split with ``bpe`` into ``folder``, then its loaders."""
    eod = bpe.token_to_id(EOS)
    sets = []
    for name, texts in zip(("train", "valid"), split_texts()):
        prefix = folder / f"megatron_{name}_text_document"
        IndexedDataset.write(prefix, [[*e.ids, eod] for e in bpe.encode_batch(texts)])
        sets.append(GPTDataset(IndexedDataset(prefix), BLOCK))
    return {
        "train_dataloaders": DataLoader(sets[0], BATCH, shuffle=False),
        "val_dataloaders": DataLoader(sets[1], BATCH),
    }


def _megatron_fit(loaders: dict[str, DataLoader], vocab: int, epochs: int, ckpt: Path, resume: bool) -> Any:
    """``epochs`` epochs of 2 steps; the first run saves ``ckpt`` at its end, a resume reads it."""
    trainer = quiet_trainer(
        ckpt.parent, [OrderValidator()], max_epochs=epochs, limit_train_batches=2, limit_val_batches=1
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(MaskedLoss(tiny_llama(vocab)), **loaders, ckpt_path=ckpt if resume else None)
    if not resume:
        trainer.save_checkpoint(ckpt)
    return trainer


@pytest.fixture()
def megatron_run(tmp_path: Path) -> tuple[Path, Path, int]:
    """A 2-step run on the indexed dataset, checkpointed: ``(data folder, checkpoint, vocabulary)``."""
    bpe = train_bpe(split_texts()[0], (EOS,))
    folder = tmp_path / "data"
    folder.mkdir()
    _megatron_fit(_megatron_loaders(folder, bpe), bpe.get_vocab_size(), 1, tmp_path / "run.ckpt", False)
    return folder, tmp_path / "run.ckpt", bpe.get_vocab_size()


def test_a_resume_on_a_re_tokenized_megatron_indexed_dataset_is_resume_data_changed(megatron_run) -> None:
    folder, checkpoint, vocab = megatron_run
    other = train_bpe(list(prose()), (EOS,))  # another tokenizer of the same size: the table fits
    assert other.get_vocab_size() == vocab
    loaders = _megatron_loaders(folder, other)
    with pytest.raises(OrderError) as caught:
        _megatron_fit(loaders, vocab, 2, checkpoint, True)
    assert caught.value.rules == ["resume-data-changed"]
    (violation,) = caught.value.violations
    assert set(violation.details["changed"]) == {"train", "val"}
    assert "same tokenizer.json" in violation.fix


def test_a_resume_on_the_same_megatron_indexed_dataset_is_silent_and_trains_on(megatron_run) -> None:
    folder, checkpoint, vocab = megatron_run
    loaders = _megatron_loaders(folder, train_bpe(split_texts()[0], (EOS,)))  # preprocessed again alike
    trainer = _megatron_fit(loaders, vocab, 2, checkpoint, True)
    validator = next(c for c in trainer.callbacks if isinstance(c, OrderValidator))
    assert validator.violations == [] and trainer.global_step == 4
    assert set(validator.content["splits"]) == {"train", "val"}


# -- 2. a BPE trained on raw HTML, the cleaned text encoded --------------------------------------
def _pages() -> tuple[list[str], list[str], list[str]]:
    """``(train, val, raw train pages)``: the docstrings as scraped pages, and the text cleaned from them."""
    train, val = split_texts()
    raw = [to_html(doc, i) for i, doc in enumerate(train)]
    return [strip_markup(page) for page in raw], [strip_markup(to_html(d, i)) for i, d in enumerate(val)], raw


class PagesClmData(ClmData):
    """run_clm's data on the cleaned pages, its BPE trained on ``fit_on`` (``"raw"``: the pages)."""

    def __init__(self, fit_on: str) -> None:
        super().__init__()
        self.fit_on = fit_on

    def setup(self, stage: str) -> None:
        if self.tokenizer is not None:
            return
        train, val, raw = _pages()
        self.tokenizer = self._tokenizer(raw if self.fit_on == "raw" else train)
        self.train_set, self.val_set = self._blocks(train), self._blocks(val)
        self.train_set.set_format("torch")
        self.val_set.set_format("torch")


def _pages_nanogpt(folder: Path, fit_on: str) -> BinData:
    """nanoGPT's ``prepare.py`` on the cleaned pages, its BPE trained on ``fit_on``."""
    train, val, raw = _pages()
    tokenizer = train_tokenizer(raw if fit_on == "raw" else train)
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    write_bin(folder / "train.bin", encode(tokenizer, train), np.uint16)
    write_bin(folder / "val.bin", encode(tokenizer, val), np.uint16)
    return BinData(folder)


def _fit_once(dm: Any, model_cls: type) -> tuple[OrderError | None, int, OrderValidator]:
    dm.setup("fit")
    validator = OrderValidator()
    trainer = quiet_trainer(None, [validator], max_steps=1, limit_val_batches=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model_cls(len(dm.tokenizer)), dm)
    except OrderError as err:
        return err, trainer.global_step, validator
    return None, trainer.global_step, validator


@pytest.mark.parametrize("fit_on", ["raw", "clean"])
@pytest.mark.parametrize("shape", ["run-clm", "nanogpt"])
def test_a_bpe_trained_on_raw_html_is_vocab_before_clean(shape: str, fit_on: str, tmp_path: Path) -> None:
    if shape == "run-clm":
        error, steps, validator = _fit_once(PagesClmData(fit_on), ClmModel)
    else:
        error, steps, validator = _fit_once(_pages_nanogpt(tmp_path / "bin", fit_on), TinyGPT)
    if fit_on == "clean":  # the correct twin: the BPE trained on the cleaned train pages
        assert error is None and validator.violations == [] and steps == 1
        return
    assert error is not None and error.rules == ["vocab-before-clean"] and steps == 0
    assert "markup-like merged entries" in str(error)


# -- 3. truncation=True at model_max_length before group_texts -----------------------------------
#: The tokenizer's ``model_max_length``: twice a block, so a truncated document never fits one row.
CONTEXT = 2 * BLOCK


class WorkerTokenizedClmData(ClmData):
    """run_clm's data tokenized by ``.map(num_proc=2)`` (``preprocessing_num_workers``): the workers'
    copies of the tokenizer truncate, the one kept here never did. ``truncate``: the planted bug."""

    def __init__(self, truncate: bool) -> None:
        super().__init__()
        self.truncate = truncate

    def _tokenizer(self, bpe_texts: list[str]) -> Any:
        tokenizer = super()._tokenizer(bpe_texts)
        tokenizer.model_max_length = CONTEXT
        return tokenizer

    def _blocks(self, texts: list[str]) -> Any:
        from datasets import Dataset

        tokenizer, eos, truncate = self.tokenizer, self.tokenizer.eos_token_id, self.truncate

        def tokenize(batch: dict[str, list]) -> dict[str, list]:
            out = tokenizer(batch["text"], truncation=truncate)  # no max_length: model_max_length
            return {
                "input_ids": [[*ids, eos] for ids in out["input_ids"]],
                "attention_mask": [[*m, 1] for m in out["attention_mask"]],
            }

        data = Dataset.from_dict({"text": texts})
        data = data.map(tokenize, batched=True, remove_columns=["text"], num_proc=2)
        return data.map(group_texts, batched=True, fn_kwargs={"block_size": self.block_size})


@pytest.mark.parametrize("truncate", [True, False], ids=["truncated", "correct"])
def test_truncation_at_model_max_length_before_group_texts_is_documents_truncated(truncate: bool) -> None:
    dm = WorkerTokenizedClmData(truncate)
    error, steps, validator = _fit_once(dm, ClmModel)
    assert dm.tokenizer.backend_tokenizer.truncation is None  # the tokenizer in use tells nothing
    if not truncate:
        assert error is None and validator.violations == [] and steps == 1
        return
    assert error is not None and error.rules == ["documents-truncated"] and steps == 0
    assert f"exactly {CONTEXT + 1} tokens long" in str(error)

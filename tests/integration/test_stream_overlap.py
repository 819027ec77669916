"""Train/validation overlap on iterable splits through a real fit (#43 item 4).

A torchtitan-style stateful stream per split: a dedup made after the split stops the run before
step 1 (``train-val-overlap``, evidence ``stream-read``); the correct split trains the batches it
trains without the validator. The shapes without a Trainer: tests/unit/callbacks/validator/test_reading.py.
"""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import FirstBatches, TinyModel, TokenStream, documents
from torch.utils.data import DataLoader

from lightning_order import OrderError, OrderValidator

BLOCK = 16


class _Splits(pl.LightningDataModule):
    def __init__(self, twins: int) -> None:
        super().__init__()
        docs = documents(60)
        self.train_docs, self.val_docs = docs[:45], docs[45:]
        for i in range(twins):  # a dedup made after the split: train documents on the validation side
            self.val_docs[i] = self.train_docs[3 * i]

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = TokenStream(self.train_docs, BLOCK), TokenStream(self.val_docs, BLOCK)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=4, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=4)


def _fit(tmp_path, twins: int, callbacks: list) -> pl.Trainer:
    torch.manual_seed(0)
    trainer = quiet_trainer(tmp_path, callbacks, max_steps=5, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(TinyModel(), _Splits(twins))
    return trainer


def test_a_dedup_after_the_split_of_two_streams_stops_the_run_before_step_1(tmp_path):
    validator = OrderValidator()
    with pytest.raises(OrderError) as raised:
        _fit(tmp_path, 5, [validator])
    assert raised.value.rules == ["train-val-overlap"] and validator.evidence["overlap"] == "stream-read"


def test_correct_streams_train_what_they_train_without_the_validator(tmp_path):
    validator, with_validator, without = OrderValidator(), FirstBatches(), FirstBatches()
    trained = _fit(tmp_path, 0, [validator, with_validator])
    _fit(tmp_path, 0, [without])
    assert validator.violations == [] and validator.evidence["overlap"] == "stream-read"
    assert trained.global_step == 5 and with_validator.hashes == without.hashes

"""The validator never changes what the run trains on (issue #37, item 9), single process.

Torchtitan-style stateful streams (tokenized on the fly, finite), a stream without ``state_dict``
and nanoGPT's ``get_batch`` on the global generator: the batches trained with ``OrderValidator()``
are the batches trained without it, and a finite stream trains all its steps. Under DDP:
tests/distributed/test_rank_reads_ddp.py.
"""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import (
    CountingStream,
    FirstBatches,
    GetBatch,
    TinyModel,
    TokenStream,
    documents,
    stream_steps,
    token_array,
)
from torch.utils.data import DataLoader

from lightning_order import OrderValidator

BLOCK, BATCH = 16, 4


class _Stream(pl.LightningDataModule):
    """The stream built once in ``setup`` (as torchtitan builds it), each loader wrapping it."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def setup(self, stage: str) -> None:
        self.train_set, self.batch_size = self.make()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, drop_last=self.batch_size is not None)


STREAMS = {
    "stateful": lambda: (TokenStream(documents(), BLOCK), BATCH),
    "counting": lambda: (CountingStream(documents(), BLOCK), BATCH),
    "get-batch": lambda: (GetBatch(token_array(), seed=1337, batch=BATCH), None),
}


def _train(make, validator: bool, tmp_path) -> tuple[list[str], int]:
    torch.manual_seed(0)
    batches = FirstBatches()
    callbacks = [OrderValidator(), batches] if validator else [batches]
    trainer = quiet_trainer(tmp_path, callbacks, max_epochs=1, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(TinyModel(), _Stream(make))
    return batches.hashes, trainer.global_step


@pytest.mark.parametrize("stream", list(STREAMS))
def test_the_batches_trained_with_the_validator_are_those_trained_without_it(stream, tmp_path) -> None:
    with_validator, steps = _train(STREAMS[stream], True, tmp_path)
    without, steps_without = _train(STREAMS[stream], False, tmp_path)
    assert with_validator[0] == without[0]
    assert with_validator == without and steps == steps_without


def test_a_finite_stateful_stream_trains_all_its_steps_with_the_validator(tmp_path) -> None:
    hashes, steps = _train(STREAMS["stateful"], True, tmp_path)
    expected = stream_steps(documents(), BLOCK, BATCH)
    assert expected > 5 and steps == len(hashes) == expected

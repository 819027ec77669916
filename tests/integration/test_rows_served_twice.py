"""``rows-served-twice`` through a real fit: two loader workers that each read every shard (llama2.c).

The validator reads the real train loader's workers on a copy before step 1: the bug stops the run
with no optimizer step; a stream split by ``get_worker_info()`` trains the batches it trains without
the validator. The cases without a Trainer: tests/unit/callbacks/validator/test_content.py.
"""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import FirstBatches, ShardStream, TinyModel
from torch.utils.data import DataLoader

from lightning_order import OrderError, OrderValidator, OrderWarning


class _OneWorkerRepeats(ShardStream):
    """Worker 0 serves each of its blocks twice in a row, worker 1 once; without workers, once: repeats
    the dataset does not hold, but from one worker only (suspected, not proven)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for row in super().__iter__():
            yield row
            if info is not None and info.id == 0:
                yield row


class _Shards(pl.LightningDataModule):
    def __init__(self, split_workers: bool, stream: type = ShardStream) -> None:
        super().__init__()
        self.split_workers, self.stream = split_workers, stream

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.stream(split_workers=self.split_workers), batch_size=4, num_workers=2)


def _fit(tmp_path, split_workers: bool, callbacks: list, stream: type = ShardStream) -> pl.Trainer:
    torch.manual_seed(0)
    trainer = quiet_trainer(tmp_path, callbacks, max_steps=6, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(TinyModel(), _Shards(split_workers, stream))
    return trainer


def test_workers_that_each_read_every_shard_stop_the_run_before_step_1(tmp_path):
    with pytest.raises(OrderError) as raised:
        _fit(tmp_path, False, [OrderValidator()])
    assert raised.value.rules == ["rows-served-twice"]
    assert "2 workers serve the same rows" in str(raised.value)


def test_a_stream_split_between_workers_trains_what_it_trains_without_the_validator(tmp_path):
    with_validator, without = FirstBatches(), FirstBatches()
    validator = OrderValidator()
    trained = _fit(tmp_path, True, [validator, with_validator])
    _fit(tmp_path, True, [without])
    assert validator.violations == [] and trained.global_step == 6
    assert with_validator.hashes == without.hashes and len(set(with_validator.hashes)) == 6


def test_repeats_from_one_worker_warn_with_their_evidence_and_the_run_goes_on(tmp_path):
    validator = OrderValidator()
    with pytest.warns(OrderWarning, match=r"rows-served-twice.*Not proven"):
        trainer = quiet_trainer(tmp_path, [validator], max_steps=3, limit_val_batches=0)
        trainer.fit(TinyModel(), _Shards(True, _OneWorkerRepeats))
    assert trainer.global_step == 3 and validator.violations == []

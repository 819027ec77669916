"""The validator's reads bounded by tokens and bytes, and nothing read held after step 1 (issue #42, item 8)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import VOCAB, TinyModel
from torch.utils.data import DataLoader, Dataset

from lightning_order import OrderValidator
from lightning_order.callbacks.validator.content import summarize_splits
from lightning_order.callbacks.validator.reading import (
    READ_BYTES,
    READ_TOKENS,
    WHOLE_BYTES,
    WHOLE_TOKENS,
    item_size,
    rows_within,
    sample_batch,
)

#: Long rows: 32k token ids (the issue's case).
TOKENS = 1 << 15


class _LongRows(Dataset):
    """``count`` rows of :data:`TOKENS` ids; every item it hands out is recorded (weakly) in ``made``."""

    def __init__(self, count: int, made: list[Any]) -> None:
        self.count, self.made = count, made
        self.row = torch.arange(TOKENS + 1, dtype=torch.int32) % VOCAB

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (self.row + i) % VOCAB
        self.made.append(weakref.ref(ids))
        return {"input_ids": ids[:-1], "labels": ids[1:].long()}


class _Data(pl.LightningDataModule):
    def __init__(self, dataset: Dataset) -> None:
        super().__init__()
        self.dataset = dataset

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)


def _alive(made: list[Any]) -> int:
    return sum(ref() is not None for ref in made)


def test_rows_within_the_budgets() -> None:
    assert rows_within(item_size({"input_ids": torch.zeros(TOKENS, dtype=torch.int32)}), 10_000) == (
        READ_TOKENS // TOKENS
    )
    assert rows_within(item_size(torch.zeros(1 << 20, dtype=torch.float32)), 10_000) == READ_BYTES // (
        4 << 20
    )
    assert rows_within(item_size(torch.zeros(1 << 30, dtype=torch.int8)[:0]), 7) == 7
    assert rows_within((1 << 40, 0), 7) == 1  # one row at least, however large


def test_a_sample_of_long_rows_is_cut_to_the_token_budget() -> None:
    made: list[Any] = []
    batch, size = sample_batch(_Data(_LongRows(600, made)), "train_dataloader", 512)
    # Two keys of TOKENS ids each: the tokens budget holds READ_TOKENS // (2 * TOKENS) rows.
    expected = READ_TOKENS // (2 * TOKENS)
    assert expected < 512 and size == 600 and batch["input_ids"].shape[0] == expected
    assert len(made) <= expected + 1  # and the row that sized the read


def test_a_split_whose_items_pass_the_whole_split_budget_is_sampled() -> None:
    dm, common = _Data(_LongRows(40, [])), {"train": 40, "val": 40}
    assert summarize_splits(dm, common, sample_rows=8, whole_rows=100)["train"]["whole"]
    # 40 rows whose first item holds a fortieth of the budget and one token more: sampled, 8 rows.
    large = (WHOLE_BYTES // 40, WHOLE_TOKENS // 40 + 1)
    summary = summarize_splits(
        dm, common, sample_rows=8, whole_rows=100, items={"train": large, "val": large}
    )
    assert not summary["train"]["whole"] and len(summary["train"]["inputs"]) == 8


class _Peak(pl.Callback):
    """The most dataset items alive at once while the validator reads, and those alive after step 1."""

    def __init__(self, made: list[Any]) -> None:
        self.made, self.after_step_1 = made, None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0:
            del outputs, batch
            gc.collect()
            self.after_step_1 = _alive(self.made)


class _Counting(_LongRows):
    """:class:`_LongRows` that also records the most of its items alive at once."""

    peak = 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = super().__getitem__(i)
        type(self).peak = max(type(self).peak, _alive(self.made))
        return item


def test_the_validator_holds_at_most_its_budgets_and_nothing_after_step_1(tmp_path) -> None:
    made: list[Any] = []
    _Counting.peak = 0
    dataset = _Counting(300, made)
    peak = _Peak(made)
    # Both splits are the one dataset: every validation token is train's (a slice shared at the cut
    # since #43), so the overlap verdict is left out; its reads are measured all the same.
    validator = OrderValidator(overlap_threshold=1.0)
    trainer = quiet_trainer(tmp_path, [validator, peak], max_steps=2, limit_val_batches=0)
    trainer.fit(TinyModel(), _Data(dataset))
    per_read = READ_TOKENS // (2 * TOKENS)
    # One chunk being hashed and the rows kept for statistics, never the whole split at once.
    assert 0 < _Counting.peak <= 2 * per_read + 2
    # What the run's own loader holds (the batch being trained, one prefetched) and nothing else.
    assert peak.after_step_1 is not None and peak.after_step_1 <= 4

"""The validator's reads leave every object they touch as they found it (issue #42, item 2; issue #48).

Each dataset below keeps state the validator's reads could move: the global torch generator an
augmentation draws from, its own generator (``numpy``, ``random``, ``torch``), a count of its
reads, an iterator kept one level down (in a list, in a reader object), a litdata-style
``state_dict`` that takes arguments. The first batches trained with ``OrderValidator()`` are the
batches trained without it, and a dataset the validator cannot read without moving it is left
alone, with a one-line note, never a traceback.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from streams import VOCAB, FirstBatches, Rows, TinyModel, documents, tokenize
from torch.utils.data import DataLoader, IterableDataset

from lightning_order import OrderValidator

BLOCK, BATCH = 16, 4


class _GlobalAugment(Rows):
    """Rows shifted by a random offset drawn from the global torch generator (an augmentation)."""

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        shift = int(torch.randint(0, VOCAB, ()))
        ids = (self.ids[i] + shift) % VOCAB
        return {"input_ids": ids[:-1], "labels": ids[1:]}


class _OwnRng(Rows):
    """Rows shifted by an offset drawn from the dataset's own generator (``self.rng``)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.rng: Any = {
            "numpy": np.random.default_rng(0),
            "numpy-legacy": np.random.RandomState(0),
            "random": random.Random(0),
            "torch": torch.Generator().manual_seed(0),
        }[kind]

    def _shift(self) -> int:
        if self.kind == "numpy":
            return int(self.rng.integers(0, VOCAB))
        if self.kind == "numpy-legacy":
            return int(self.rng.randint(0, VOCAB))
        if self.kind == "random":
            return self.rng.randrange(VOCAB)
        return int(torch.randint(0, VOCAB, (), generator=self.rng))

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (self.ids[i] + self._shift()) % VOCAB
        return {"input_ids": ids[:-1], "labels": ids[1:]}


class _CountsReads(Rows):
    """Rows whose ids move with the number of reads so far (a curriculum keyed on a counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.reads += 1
        ids = (self.ids[i] + self.reads) % VOCAB
        return {"input_ids": ids[:-1], "labels": ids[1:]}


def _windows(texts: Any) -> Any:
    """Windows of ``BLOCK + 1`` tokens packed from the texts an iterator yields."""
    buffer: list[int] = []
    for text in texts:
        buffer.extend(tokenize(text))
        while len(buffer) > BLOCK:
            ids, buffer = torch.tensor(buffer[: BLOCK + 1]), buffer[BLOCK + 1 :]
            yield {"input_ids": ids[:-1], "labels": ids[1:]}


class _IteratorInList(IterableDataset):
    """A stream over an iterator kept in a list attribute (several sources, one open)."""

    def __init__(self) -> None:
        self.sources = [iter(documents())]

    def __iter__(self):
        return _windows(self.sources[0])


class _Reader:
    """A reader object holding an open iterator over its documents."""

    def __init__(self, docs: list[str]) -> None:
        self.lines = iter(docs)


class _IteratorInReader(IterableDataset):
    """A stream reading from a reader object's iterator."""

    def __init__(self) -> None:
        self.reader = _Reader(documents())

    def __iter__(self):
        return _windows(self.reader.lines)


class _StreamRng(IterableDataset):
    """A stream that shuffles each window's place from its own numpy generator, kept on itself."""

    def __init__(self) -> None:
        self.docs = documents()
        self.rng = np.random.default_rng(0)

    def __iter__(self):
        for window in _windows(self.docs):
            shift = int(self.rng.integers(0, VOCAB))
            yield {k: (v + shift) % VOCAB for k, v in window.items()}


class StreamingDataset(IterableDataset):
    """litdata's ``StreamingDataset`` in shape: ``state_dict`` needs three arguments (issue #48)."""

    def __init__(self) -> None:
        self.docs = documents()
        self.yielded = 0

    def state_dict(self, num_samples_yielded: int, num_workers: int, batch_size: int) -> dict[str, Any]:
        return {"yielded": num_samples_yielded, "workers": num_workers, "batch": batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.yielded = int(state["yielded"])

    def __iter__(self):
        for n, window in enumerate(_windows(self.docs)):
            if n >= self.yielded:
                yield window


DATASETS = {
    "global-torch-augment": _GlobalAugment,
    "own-numpy-rng": lambda: _OwnRng("numpy"),
    "own-numpy-randomstate": lambda: _OwnRng("numpy-legacy"),
    "own-random": lambda: _OwnRng("random"),
    "own-torch-generator": lambda: _OwnRng("torch"),
    "counts-reads": _CountsReads,
    "iterator-in-list": _IteratorInList,
    "iterator-in-reader": _IteratorInReader,
    "stream-own-rng": _StreamRng,
    "litdata-state-dict-with-arguments": StreamingDataset,
}


class _Plain(pl.LightningDataModule):
    """A hand-written datamodule (no glue): one train loader over the dataset, in order."""

    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def setup(self, stage: str) -> None:
        self.train_set = self.make()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=BATCH)


def _first_batches(make: Any, validator: bool, tmp_path: Any) -> list[str]:
    torch.manual_seed(0)
    batches = FirstBatches()
    callbacks = [OrderValidator(), batches] if validator else [batches]
    trainer = quiet_trainer(tmp_path, callbacks, max_steps=2, max_epochs=1, limit_val_batches=0)
    trainer.fit(TinyModel(), _Plain(make))
    return batches.hashes


@pytest.mark.parametrize("name", list(DATASETS))
def test_the_first_batches_trained_are_the_same_with_and_without_the_validator(name, tmp_path) -> None:
    with_validator = _first_batches(DATASETS[name], True, tmp_path)
    without = _first_batches(DATASETS[name], False, tmp_path)
    assert len(without) == 2
    assert with_validator == without


@pytest.mark.parametrize(
    "name", ["iterator-in-list", "iterator-in-reader", "litdata-state-dict-with-arguments"]
)
def test_a_dataset_that_cannot_be_read_untouched_is_skipped_with_a_one_line_note(
    name, tmp_path, caplog
) -> None:
    # The note is logged on rank zero through lightning_order.distributed's logger (no Lightning).
    with caplog.at_level(logging.INFO, logger="lightning_order.distributed"):
        _first_batches(DATASETS[name], True, tmp_path)
    notes = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert notes and all("\n" not in note for note in notes)
    assert any(type(DATASETS[name]()).__name__ in note for note in notes)

"""What the resume tests share (single process and DDP): tiny DataModules and models, and a callback
that hashes every training batch row by row (tests/integration/test_resume.py,
tests/distributed/test_resume_ddp.py and its script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from torch.utils.data import DataLoader, TensorDataset

from lightning_order import OrderedCausalLM, OrderedDataModule, OrderedLMDataModule, OrderedTextClassifier

#: Per-rank batch sizes: 17 steps an epoch for the text demo, 23 for the LM corpus, on one rank.
BATCH = {"standard": 32, "lm": 128}


def datamodule(kind: str, cache: Path | str, batch_size: int | None = None, **kwargs: Any) -> Any:
    """The tiny ``kind`` DataModule ("standard" or "lm") in ``cache``, with two loader workers."""
    options = {"batch_size": batch_size or BATCH[kind], "num_workers": 2, "cache_dir": str(cache), **kwargs}
    if kind == "standard":
        return OrderedDataModule(demo_size=600, vocab_size=200, max_length=16, **options)
    return OrderedLMDataModule(max_documents=200, vocab_size=300, block_size=16, **options)


def model(kind: str, dm: Any) -> pl.LightningModule:
    """A tiny model of ``kind`` built from ``dm``'s dims."""
    if kind == "standard":
        return OrderedTextClassifier(**dm.dims, embed_dim=8, hidden_dim=8)
    return OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=16)


def row_hashes(batch: dict[str, torch.Tensor]) -> list[str]:
    """One hash per sample: its ``input_ids`` with the last label (a whole LM block; a text row)."""
    ids = batch["input_ids"].cpu().numpy()
    labels = batch["labels"].cpu().numpy()
    rows = np.concatenate([ids.reshape(len(ids), -1), labels.reshape(len(labels), -1)[:, -1:]], axis=1)
    return [xxhash.xxh3_64_hexdigest(np.ascontiguousarray(row).tobytes()) for row in rows]


class BatchHashes(pl.Callback):
    """Records ``(epoch, batch_idx, row hashes)`` of every training batch, before the step."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, list[str]]] = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        rows = (
            row_hashes(batch)
            if isinstance(batch, dict)
            else [xxhash.xxh3_64_hexdigest(batch[0].numpy().tobytes())]
        )
        self.batches.append((int(trainer.current_epoch), int(batch_idx), rows))

    def hashes(self) -> list[list[str]]:
        """The batches' row hashes, in training order."""
        return [rows for _, _, rows in self.batches]


class PlainData(pl.LightningDataModule):
    """A hand-written DataModule with a plain, unshuffled ``DataLoader``: 10 batches of 10 an epoch."""

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(100, 4, generator=generator)
        return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=10)


class PlainModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

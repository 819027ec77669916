"""DDP (2 CPU ranks, gloo): the label-encoding check on a hand-written datamodule with per-rank shards.

Usage: ``python label_ddp.py OUT_DIR {leak,sound} {validator,monitor}``. The standard library's
functions (tests/label_data.py) with their module's target encoding, fitted on train +
validation rows (``leak``) or on train rows (``sound``). Each rank keeps its own shard of the
train rows (``rows[rank::2]``: the check must join them) and the whole validation split (the same
on both ranks: kept once). ``validator``: OrderValidator (warn) and SymptomMonitor; ``monitor``:
the monitor alone, which then reads the splits itself. Every rank writes ``rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for label_data.py

import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from label_data import feature_table, stdlib_rows
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order._distributed import release_process_group


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class ShardedFunctions(pl.LightningDataModule):
    def __init__(self, leak: bool) -> None:
        super().__init__()
        self.leak = leak

    def setup(self, stage: str) -> None:
        tx, ty, vx, vy = feature_table(stdlib_rows(), leak=self.leak)
        rank, world = self.trainer.global_rank, self.trainer.world_size
        self.train = TensorDataset(torch.from_numpy(tx[rank::world]), torch.from_numpy(ty[rank::world]))
        self.val = TensorDataset(torch.from_numpy(vx), torch.from_numpy(vy))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=32, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=128)


def main(out: Path, mode: str, callbacks: str) -> None:
    pl.seed_everything(0, workers=True)
    torch.set_num_threads(1)
    monitor = SymptomMonitor(verbose=False)
    validator = OrderValidator(on_violation="warn")
    chosen = [validator, monitor] if callbacks == "validator" else [monitor]
    trainer = quiet_trainer(None, chosen, devices=2, strategy="ddp", max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Classifier(), ShardedFunctions(leak=mode == "leak"))
    result = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "violations": [v.to_dict() for v in validator.violations] if callbacks == "validator" else [],
        "diagnoses": [d.to_dict() for d in monitor.diagnoses],
        "steps_per_epoch": trainer.num_training_batches,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result, default=str))
    release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])

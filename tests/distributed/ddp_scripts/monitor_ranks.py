"""DDP on 2 CPU ranks (gloo) with a SymptomMonitor: per-rank statistics vs. a correct run.

Usage: ``python monitor_ranks.py OUT_DIR MODE [SEED]``. The monitor runs with ``on_symptom="stop"``.
Every rank writes ``rank<r>.json`` with its diagnoses, its per-step losses, the step it stopped
at and the pause checkpoint's path. ``run`` is also called by monitor_ddp.py (several cases in
one launch).

* ``per-shard``: two sources with different units (one Gaussian, one skewed); the data is sharded
  by source (rank r holds source r) and each rank standardises its shard with its own statistics,
  the ``shard-before-normalize`` order error. The same value means different things on the two
  ranks, so the shared model fits one rank worse than the other.
* ``shuffled``: the same rows, shuffled before sharding and standardised with global statistics.
* ``demo``: the reference model on ``OrderedDataModule`` in the mandated order (the demo corpus).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_order.callbacks.monitor.callback import SymptomMonitor
from lightning_order.distributed import release_process_group

warnings.filterwarnings("ignore")
ROWS_PER_SOURCE = 1920


def _sources(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    gaussian = torch.randn(ROWS_PER_SOURCE, 4, generator=g)
    skewed = torch.exp(torch.randn(ROWS_PER_SOURCE, 4, generator=g)) * 3 + 1  # other units, skewed
    x = torch.cat([gaussian, skewed])
    y = (x[:, 0] + 0.5 * x[:, 1] > 0.8).long()  # one rule, in raw units, for both sources
    return x, y


def _standardise(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (x - like.mean(0)) / like.std(0)


class ShardedData(pl.LightningDataModule):
    def __init__(self, mode: str, seed: int) -> None:
        super().__init__()
        self.mode, self.seed = mode, seed

    def train_dataloader(self) -> DataLoader:
        x, y = _sources(self.seed)
        rank, world = self.trainer.global_rank, self.trainer.world_size
        if self.mode == "per-shard":
            rows = torch.arange(rank * ROWS_PER_SOURCE, (rank + 1) * ROWS_PER_SOURCE)  # shard = source
            shard = x[rows]
            features = _standardise(shard, shard)  # statistics of this rank's shard only
        else:
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(self.seed))
            rows = order[rank::world]
            features = _standardise(x[rows], x)  # statistics of the whole train split
        g = torch.Generator().manual_seed(self.seed + rank)
        return DataLoader(TensorDataset(features, y[rows]), batch_size=32, shuffle=True, generator=g)


class MLP(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


class LossRecorder(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(outputs["loss"].detach())


def run(out: Path, mode: str, seed: int = 0) -> dict:
    """Fits one ``mode`` on 2 ranks (files under ``out``); returns what this rank saw."""
    pl.seed_everything(seed, workers=True)
    torch.set_num_threads(1)
    if mode == "demo":
        from lightning_order.data.text.datamodule import OrderedDataModule
        from lightning_order.models import OrderedTextClassifier

        data = OrderedDataModule(
            demo_size=4000,
            vocab_size=1000,
            max_length=64,
            batch_size=32,
            seed=seed,
            cache_dir=str(out / "cache"),
        )
        model: pl.LightningModule = OrderedTextClassifier(**data.dims)
        epochs = 1
    else:
        data, model, epochs = ShardedData(mode, seed), MLP(), 2
    monitor = SymptomMonitor(on_symptom="stop", check_every_n_steps=10, gpu_hour_price=1.0)
    recorder = LossRecorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        use_distributed_sampler=mode == "demo",
        callbacks=[monitor, recorder],
        default_root_dir=str(out),
    )
    trainer.fit(model, data)
    return {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "mode": mode,
        "diagnoses": [d.to_dict() for d in monitor.diagnoses],
        "losses": torch.stack(recorder.losses).tolist(),
        "global_step": trainer.global_step,
        "pause_path": monitor.pause_path,
    }


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    result = run(out, mode, seed)
    (out / f"rank{result['rank']}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

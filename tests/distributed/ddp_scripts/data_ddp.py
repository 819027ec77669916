"""Two CPU ranks (gloo, strategy="ddp") train on an OrderedDataModule; each rank writes what it saw.

Usage: python data_ddp.py OUT_DIR CACHE_DIR [default|shard-before-normalize]
Writes OUT_DIR/rank<r>.json: shard info, data fingerprints, the shard's key hashes, the number of
train batches, how many times this process ran the preparation (counted by wrapping the demo
corpus generator the ``load`` step calls), and the ledger's rule codes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import pytorch_lightning as pl
import torch
from torch import nn

from lightning_order import STANDARD_PIPELINE, OrderedDataModule
from lightning_order.data.text import load as load_module
from lightning_order.distributed import release_process_group

PREPARATIONS = []
_generate = load_module.make_demo_corpus


def _counting(*args, **kwargs):
    PREPARATIONS.append(1)
    return _generate(*args, **kwargs)


load_module.make_demo_corpus = _counting

WRONG = ["load", "clean", "engineer_features", "split", "build_vocab", "encode", "shard", "fit_features"]


class Tiny(pl.LightningModule):
    def __init__(self, vocab_size: int, num_features: int, num_classes: int, max_length: int) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, 8, padding_idx=0)
        self.head = nn.Linear(8 + num_features, num_classes)
        self.train_batches = 0

    def forward(self, batch):
        return self.head(torch.cat([self.embed(batch["input_ids"]), batch["features"]], dim=1))

    def training_step(self, batch, batch_idx):
        self.train_batches += 1
        return nn.functional.cross_entropy(self(batch), batch["labels"])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self(batch), batch["labels"]), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    out, cache = Path(sys.argv[1]), sys.argv[2]
    variant = sys.argv[3] if len(sys.argv) > 3 else "default"
    kwargs = {"order": WRONG, "enforce": False, "demo_sources": 2} if variant != "default" else {}
    dm = OrderedDataModule(
        cache_dir=cache, demo_size=1001, vocab_size=300, max_length=16, batch_size=16, **kwargs
    )
    model = Tiny(**dm.dims)  # every rank reads dims: they race for the lock, one prepares
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, dm)
    rank = trainer.global_rank
    result = {
        "rank": rank,
        "shard_info": dm.shard_info,
        "fingerprints": dm.data_fingerprints(),
        "key_hashes": dm.key_hashes("train").tolist(),
        "train_rows": len(datasets.load_from_disk(str(dm.cache_path / "train"))),
        "train_keys": list(datasets.load_from_disk(str(dm.cache_path / "train"))["key_hash"]),
        "train_batches": model.train_batches,
        "pipeline_runs": len(PREPARATIONS),
        "rules": sorted({v.rule for v in STANDARD_PIPELINE.check(dm.ledger)}),
        "ledger_steps": dm.ledger.steps(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

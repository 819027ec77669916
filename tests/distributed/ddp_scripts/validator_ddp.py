"""DDP (2 CPU ranks, gloo), one launch: OrderValidator silent on a correct pipeline, and stopping
a rank-level error on every rank without a hang.

Run by tests/distributed/test_order_validator_ddp.py with argv = [output folder]. The cases run
one after another in the same process group (Lightning launches the second rank at the first
``fit``; later Trainers reuse it), the one that raises nothing first:

- ``correct``: ``OrderedDataModule`` in the mandated order; each rank fits with a checkpoint, then
  validates, and records what it saw (warnings, ledger, shard info, fingerprints);
- ``per-shard``: ``OrderedDataModule`` fits the feature statistics per shard (``shard`` before
  ``fit_features``): every rank normalises with its own statistics;
- ``unequal``: a hand-written datamodule whose ranks hold shards of different lengths.

The validator agrees on its verdict on every rank before it raises, so both ranks raise
``OrderError`` together; each catches it (an uncaught exception ends the launch) after recording
the rule codes from ``on_exception``, then a barrier. Each rank writes ``rank<r>.json``, a key per
case, after every case.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helpers
from helpers import quiet_trainer

from lightning_order import OrderedDataModule, OrderError, OrderValidator, OrderWarning
from lightning_order.checks import check_ledger
from lightning_order.distributed import release_process_group
from lightning_order.models import OrderedTextClassifier

RIGHT = ["load", "clean", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"]


class Recorder(Callback):
    """Records what each rank raised, and counts train batches."""

    def __init__(self) -> None:
        self.batches = 0
        self.result: dict[str, Any] = {"error": None}

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.batches += 1

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        rules = exception.rules if isinstance(exception, OrderError) else []
        self.result = {
            "rank": trainer.global_rank,
            "error": type(exception).__name__,
            "rules": rules,
            "message": str(exception),
            "global_step": trainer.global_step,
            "batches": self.batches,
        }
        torch.distributed.barrier()


class _Rows(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(n)
        self.ids, self.features = torch.randint(1, 50, (n, 8), generator=g), torch.randn(n, 3, generator=g)
        self.labels = torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(8, dtype=torch.long),
            "features": self.features[i],
            "labels": self.labels[i],
        }


class UnequalShards(pl.LightningDataModule):
    """Shards the data itself, one row short on rank 1: DDP would hang at the end of the epoch."""

    def setup(self, stage: str) -> None:
        rank = self.trainer.global_rank
        self.shard_info = {"rank": rank, "world_size": 2, "length": 96 - rank, "dropped": 0}
        self.train, self.val = _Rows(96 - rank), _Rows(32)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=16)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=16)


def run_correct(out: Path) -> dict[str, Any]:
    pl.seed_everything(0, workers=True)
    dm = OrderedDataModule(
        demo_size=600, vocab_size=300, max_length=16, batch_size=16, cache_dir=str(out / "cache-correct")
    )
    model = OrderedTextClassifier(**dm.dims, embed_dim=8, hidden_dim=8)
    validator = OrderValidator()
    trainer = quiet_trainer(
        callbacks=[validator, ModelCheckpoint(dirpath=out / "ckpt", save_last=True)],
        devices=2,
        strategy="ddp",
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=2,
        enable_checkpointing=True,
        num_sanity_val_steps=2,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
        trainer.validate(model, dm, verbose=False)
    return {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "order_warnings": [str(w.message)[:300] for w in caught if issubclass(w.category, OrderWarning)],
        "shard_info": dm.shard_info,
        "ledger_violations": [v.rule for v in check_ledger(dm.ledger)],
        "ledger_steps": dm.ledger.steps(),
        "fingerprints": validator.state_dict()["fingerprints"],
    }


def run_wrong(out: Path, case: str) -> dict[str, Any]:
    if case == "per-shard":
        order = [s for s in RIGHT if s != "fit_features"] + ["fit_features"]
        dm: pl.LightningDataModule = OrderedDataModule(
            demo_size=600,
            vocab_size=300,
            max_length=16,
            batch_size=16,
            cache_dir=str(out / "cache-per-shard"),
            order=order,
            enforce=False,
            demo_sources=2,
        )
        model = OrderedTextClassifier(**dm.dims, embed_dim=8, hidden_dim=8)
    elif case == "unequal":
        dm = UnequalShards()
        model = OrderedTextClassifier(vocab_size=50, num_features=3, num_classes=4, embed_dim=8, hidden_dim=8)
    else:
        raise SystemExit(f"unknown case {case!r}")
    recorder = Recorder()
    trainer = quiet_trainer(
        callbacks=[OrderValidator(planned_hours=5), recorder],
        devices=2,
        strategy="ddp",
        max_epochs=1,
        limit_train_batches=3,
        num_sanity_val_steps=2,
    )
    try:
        trainer.fit(model, dm)
    except OrderError:
        return recorder.result
    return {"rank": trainer.global_rank, "error": None}


def main(out: Path) -> None:
    results = {"correct": run_correct(out)}
    rank = results["correct"]["rank"]
    path = out / f"rank{rank}.json"
    path.write_text(json.dumps(results))
    for case in ("per-shard", "unequal"):  # both raise OrderError; each is caught on every rank
        results[case] = run_wrong(out, case)
        path.write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

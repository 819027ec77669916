"""Two CPU ranks (gloo) under ModelParallelStrategy train OrderedCausalLM on OrderedLMDataModule; each rank writes what it read.

Usage: python mesh_ddp.py OUT_DIR CACHE_ROOT
One launch, its cases one after another in the same process group (each Trainer builds its own
device mesh), each with its own cache ``CACHE_ROOT/<case>``:

- ``dp1xtp2``: one tensor-parallel group of 2 ranks: both must read the same batches;
- ``dp2xtp1``: two data-parallel ranks: disjoint shares of the epoch;
- ``plain-dp1xtp2``: a hand-written datamodule keeping its share by the data-parallel rank: silent;
- ``plain-dp1xtp2-global-rank``: the same, sharding by the global rank: the validator stops it,
  naming the tensor-parallel group;
- ``dp1xtp2-global-rank``: the DataModule shards by the global rank (what it did before #36): the
  validator must stop both ranks before step 1, naming the tensor-parallel group; it runs last.

Writes OUT_DIR/rank<r>.json, a key per case, after every case: the DataModule's shard info, a hash
of each train batch this rank trained on, the hashes of the blocks of its first epoch, the
validator's violations (rule, dimension, message) or the error it raised.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from pytorch_lightning.strategies import ModelParallelStrategy
from torch.utils.data import DataLoader

import lightning_order.data.engine.datamodule as datamodule_module
from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator
from lightning_order.distributed import release_process_group
from lightning_order.parallelism import DataParallel

CASES = {
    "dp1xtp2": (1, 2),
    "dp2xtp1": (2, 1),
    "plain-dp1xtp2": (1, 2),
    "plain-dp1xtp2-global-rank": (1, 2),
    "dp1xtp2-global-rank": (1, 2),
}


class PlainData(pl.LightningDataModule):
    """A hand-written datamodule (no glue) that keeps its share of the rows in setup: by the
    data-parallel rank (Lightning's distributed_sampler_kwargs), or by the global rank (the error)."""

    def __init__(self, by_global_rank: bool) -> None:
        super().__init__()
        self.by_global_rank = by_global_rank

    def setup(self, stage: str) -> None:
        rng = torch.Generator().manual_seed(0)
        rows = [
            {"input_ids": torch.randint(0, 50, (8,), generator=rng), "labels": torch.tensor(i % 2)}
            for i in range(256)
        ]
        if self.by_global_rank:
            count, index = self.trainer.world_size, self.trainer.global_rank
        else:
            kwargs = self.trainer.strategy.distributed_sampler_kwargs
            count, index = kwargs["num_replicas"], kwargs["rank"]
        self.train_rows, self.val_rows = rows[:192][index::count], rows[192:]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_rows, batch_size=4)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_rows, batch_size=4)


class PlainModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 8)
        self.head = torch.nn.Linear(8, 2)

    def configure_model(self) -> None:
        pass

    def training_step(self, batch, batch_idx):
        logits = self.head(self.embedding(batch["input_ids"]).mean(1))
        return torch.nn.functional.cross_entropy(logits, batch["labels"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class MeshLM(OrderedCausalLM):
    """ModelParallelStrategy requires configure_model; the data is what is under test, not the layers."""

    def configure_model(self) -> None:
        pass


class BatchHashes(pl.Callback):
    def __init__(self) -> None:
        self.hashes: list[str] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.hashes.append(xxhash.xxh3_64_hexdigest(batch["input_ids"].cpu().numpy().tobytes()))


def _global_rank_sharding(trainer) -> DataParallel:
    """The sharding of before #36: every process its own share, whatever the mesh."""
    world, rank = int(trainer.world_size), int(trainer.global_rank)
    return DataParallel(world, rank, world, rank)


def run(cache: str, case: str) -> dict:
    dp, tp = CASES[case]
    if case.endswith("global-rank"):
        datamodule_module.data_parallel = _global_rank_sharding
    if case.startswith("plain"):
        dm, model = PlainData(by_global_rank=case.endswith("global-rank")), PlainModel()
    else:
        dm = OrderedLMDataModule(
            max_documents=200, vocab_size=300, block_size=16, batch_size=4, cache_dir=cache
        )
        model = MeshLM(**dm.dims, n_layer=1, n_head=2, n_embd=16)
    validator, batches = OrderValidator(), BatchHashes()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=ModelParallelStrategy(data_parallel_size=dp, tensor_parallel_size=tp),
        max_steps=3,
        callbacks=[validator, batches],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    result: dict = {}
    try:
        trainer.fit(model, dm)
    except OrderError as err:
        result.update(error="OrderError", rules=err.rules, message=str(err))
    blocks = np.asarray(dm.blocks("train")) if hasattr(dm, "blocks") else np.zeros((0, 1))
    result.update(
        rank=trainer.global_rank,
        shard_info=getattr(dm, "shard_info", None),
        batch_hashes=batches.hashes,
        block_hashes=[xxhash.xxh3_64_hexdigest(row.tobytes()) for row in blocks],
        global_step=trainer.global_step,
        violations=[
            {"rule": v.rule, "dimension": (v.details or {}).get("dimension"), "message": v.message}
            for v in (validator.violations or [])
        ],
    )
    return result


def main() -> None:
    out, cache_root = Path(sys.argv[1]), Path(sys.argv[2])
    results: dict = {}
    for case in CASES:
        results[case] = run(str(cache_root / case), case)
        (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

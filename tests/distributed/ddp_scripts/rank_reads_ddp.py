"""2 CPU ranks (gloo), one launch: which samples each rank reads, and a stateful stream read by the validator.

Usage: python rank_reads_ddp.py OUT_DIR CACHE_ROOT
The cases run one after another in the same process group; the validator raises (every rank at
once, before step 1) and each case catches it. Writes OUT_DIR/rank<r>.json, a key per case: the
rule codes and messages of the violations, the global step, the hashes of the trained batches.

Planted: ``sampler-seed-rank`` (``DistributedSampler(seed=rank)``), ``all-data``
(``use_distributed_sampler=False``, every rank shuffling all rows), ``get-batch-same-seed``
(nanoGPT's ``get_batch`` seeded alike on every rank). Correct: ``lightning-sampler`` (Lightning's
own ``DistributedSampler``), ``sampler-same-seed`` (``DistributedSampler(seed=0)`` by hand),
``get-batch-seed-rank`` (seed ``1337 + rank``), ``ordered-lm`` (``OrderedLMDataModule``),
``nanogpt`` (tests/nanogpt.py's correct pipeline; planted: ``nanogpt-seed-rank``, its loader with
``DistributedSampler(seed=rank)``),
``tp-group-all-data`` (``ModelParallelStrategy`` dp 1 × tp 2, both ranks reading all rows: one
tensor-parallel group reads the same batches by design). Item 9: ``stream-with`` /
``stream-without``: a stateful per-rank token stream with and without ``OrderValidator()``.
#43 item 4: ``workers-each-read-all`` (two loader workers that each read every shard of the rank's
share: ``rows-served-twice``) and ``workers-split`` (the shards split by ``get_worker_info()``).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for streams.py and nanogpt.py

import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from nanogpt import VOCAB, BinData, TinyGPT, prepare
from pytorch_lightning.strategies import ModelParallelStrategy
from streams import (
    FirstBatches,
    GetBatch,
    Rows,
    ShardStream,
    TinyModel,
    TokenStream,
    documents,
    stream_steps,
    token_array,
)
from torch.utils.data import DataLoader, DistributedSampler

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator
from lightning_order.distributed import release_process_group

BLOCK, BATCH = 16, 4


class Loaders(pl.LightningDataModule):
    """A hand-written datamodule around one train loader factory (no glue); its dataset is built
    once in ``setup`` (as torchtitan builds its stream) and every loader wraps that one."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def setup(self, stage: str) -> None:
        self.loader = self.make(self.trainer)

    def train_dataloader(self) -> DataLoader:
        loader = self.loader
        if loader.sampler is None or isinstance(loader.dataset, torch.utils.data.IterableDataset):
            return DataLoader(
                loader.dataset,
                batch_size=loader.batch_size,
                drop_last=loader.drop_last,
                num_workers=loader.num_workers,
            )
        return loader


def _sampler_seed_rank(trainer) -> DataLoader:
    rows = Rows()
    sampler = DistributedSampler(
        rows, num_replicas=trainer.world_size, rank=trainer.global_rank, seed=trainer.global_rank
    )
    return DataLoader(rows, batch_size=BATCH, sampler=sampler)


def _sampler_same_seed(trainer) -> DataLoader:
    rows = Rows()
    sampler = DistributedSampler(rows, num_replicas=trainer.world_size, rank=trainer.global_rank, seed=0)
    return DataLoader(rows, batch_size=BATCH, sampler=sampler)


def _shards(trainer, split_workers: bool) -> DataLoader:
    stream = ShardStream(split_workers=split_workers, rank=trainer.global_rank, world=trainer.world_size)
    return DataLoader(stream, batch_size=BATCH, num_workers=2)


CASES = {
    "sampler-seed-rank": (_sampler_seed_rank, {}),
    "sampler-same-seed": (_sampler_same_seed, {}),
    "all-data": (
        lambda t: DataLoader(Rows(), batch_size=BATCH, shuffle=True),
        {"use_distributed_sampler": False},
    ),
    "lightning-sampler": (lambda t: DataLoader(Rows(), batch_size=BATCH, shuffle=True), {}),
    "get-batch-same-seed": (lambda t: DataLoader(GetBatch(token_array(), seed=1337), batch_size=None), {}),
    "get-batch-seed-rank": (
        lambda t: DataLoader(GetBatch(token_array(), seed=1337 + t.global_rank), batch_size=None),
        {},
    ),
    "workers-each-read-all": (lambda t: _shards(t, split_workers=False), {}),
    "workers-split": (lambda t: _shards(t, split_workers=True), {}),
    "tp-group-all-data": (  # every rank all rows in one order: a DDP error, a tensor-parallel group's duty
        lambda t: DataLoader(Rows(), batch_size=BATCH),
        {"use_distributed_sampler": False},
    ),
}


def _trainer(callbacks: list, max_steps: int = 2, **kwargs) -> pl.Trainer:
    settings = {"strategy": "ddp", **kwargs}
    return quiet_trainer(
        None, callbacks, devices=2, max_steps=max_steps, max_epochs=1, limit_val_batches=0, **settings
    )


def _fit(trainer: pl.Trainer, model, dm, validator: OrderValidator | None, batches: FirstBatches) -> dict:
    result: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainer.fit(model, dm)
        except OrderError as err:
            result.update(error="OrderError", message=str(err))
    violations = validator.violations if validator is not None else []
    return {
        **result,
        "rank": trainer.global_rank,
        "rules": [v.rule for v in violations],
        "messages": [v.message for v in violations],
        "details": [v.details for v in violations],
        "global_step": trainer.global_step,
        "batches": batches.hashes,
    }


def run_case(case: str) -> dict:
    make, kwargs = CASES[case]
    if case.startswith("tp-group"):
        kwargs = {**kwargs, "strategy": ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2)}
    validator, batches = OrderValidator(), FirstBatches()
    return _fit(_trainer([validator, batches], **kwargs), TinyModel(), Loaders(make), validator, batches)


def run_lm(cache: str) -> dict:
    dm = OrderedLMDataModule(max_documents=200, vocab_size=300, block_size=16, batch_size=4, cache_dir=cache)
    model = OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=16)
    validator, batches = OrderValidator(), FirstBatches()
    return _fit(_trainer([validator, batches]), model, dm, validator, batches)


class SeedPerRankBinData(BinData):
    """nanoGPT's shape (``train.bin`` windows) with a ``DistributedSampler`` seeded by the rank."""

    def train_dataloader(self) -> DataLoader:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        sampler = DistributedSampler(self.train_set, num_replicas=world, rank=rank, seed=rank)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler)


def run_nanogpt(folder: Path, data_cls: type) -> dict:
    """The pipeline of tests/nanogpt.py (each rank prepares the same files in its own folder)."""
    prepare(folder)
    validator, batches = OrderValidator(), FirstBatches()
    return _fit(_trainer([validator, batches]), TinyGPT(VOCAB), data_cls(folder), validator, batches)


def run_stream(with_validator: bool) -> dict:
    """A finite stateful stream, a share of the documents per rank, one epoch: every step trained?"""
    docs = documents(length=60)  # every rank's share yields as many batches (DDP needs it)
    validator, batches = (OrderValidator() if with_validator else None), FirstBatches()
    dm = Loaders(
        lambda t: DataLoader(
            TokenStream(docs, BLOCK, t.global_rank, t.world_size), batch_size=BATCH, drop_last=True
        )
    )
    callbacks = [c for c in (validator, batches) if c is not None]
    result = _fit(_trainer(callbacks, max_steps=-1), TinyModel(), dm, validator, batches)
    ranks = torch.distributed.get_world_size()
    result["expected_steps"] = min(stream_steps(docs, BLOCK, BATCH, r, ranks) for r in range(ranks))
    return result


def main() -> None:
    out, cache_root = Path(sys.argv[1]), Path(sys.argv[2])
    results: dict = {}
    for case in CASES:
        results[case] = run_case(case)
        (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))
    results["ordered-lm"] = run_lm(str(cache_root / "lm"))
    rank = results["ordered-lm"]["rank"]
    results["nanogpt-seed-rank"] = run_nanogpt(cache_root / f"nanogpt-{rank}", SeedPerRankBinData)
    results["nanogpt"] = run_nanogpt(cache_root / f"nanogpt-{rank}", BinData)
    results["stream-with"] = run_stream(True)
    results["stream-without"] = run_stream(False)
    (out / f"rank{results['ordered-lm']['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

"""What ``OrderValidator()`` adds to a run's memory on long rows: peak RSS, and RSS after step 1.

A plain (no-glue) datamodule of ``--rows`` rows of ``--tokens`` token ids (``input_ids`` int32,
``labels`` int64, both splits the same dataset) and a two-step fit of an embedding and a head, in a
fresh process per side (with and without the validator), alternating, ``--repeats`` times; the
figures are each side's smallest. The validator's reads are bounded by the budgets of
``lightning_order/callbacks/validator/reading.py`` (docs/validator.md, "Memory").

    python benchmarks/bench_validator_memory.py --rows 1000 --tokens 32768 --repeats 2 [--results]

``--results`` writes ``benchmarks/results/validator_memory.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import warnings

import pytorch_lightning as pl
import torch
from figures import command_line, write_results
from torch.utils.data import DataLoader, Dataset

VOCAB = 64


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


class _LongRows(Dataset):
    def __init__(self, rows: int, tokens: int) -> None:
        self.rows, self.row = rows, torch.arange(tokens + 1, dtype=torch.int32) % VOCAB

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (self.row + i) % VOCAB
        return {"input_ids": ids[:-1], "labels": ids[1:].long()}


class _Data(pl.LightningDataModule):
    def __init__(self, rows: int, tokens: int) -> None:
        super().__init__()
        self.dataset = _LongRows(rows, tokens)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=2)


class _Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.head = torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self.head(self.embedding(batch["input_ids"]))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _AfterStep1(pl.Callback):
    rss = 0.0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if args[-1] == 0:
            gc.collect()
            self.rss = _rss_mb()


def _one(rows: int, tokens: int, validator: bool) -> dict[str, float]:
    from lightning_order import OrderValidator

    warnings.simplefilter("ignore")
    after = _AfterStep1()
    callbacks: list[pl.Callback] = [after]
    if validator:
        callbacks.insert(0, OrderValidator(on_violation="warn"))
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=2, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.callbacks += callbacks
    start = _rss_mb()
    trainer.fit(_Model(), _Data(rows, tokens))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"start_mb": start, "after_step_1_mb": after.rss, "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/validator_memory.json, the figures the docs quote"
    )
    parser.add_argument("--one", choices=["with", "without"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.rows, args.tokens, args.one == "with")))
        return
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for side in ("without", "with"):
            command = [sys.executable, __file__, "--rows", str(args.rows), "--tokens", str(args.tokens)]
            out = subprocess.run([*command, "--one", side], capture_output=True, text=True, check=True)
            run = json.loads(out.stdout.strip().splitlines()[-1])
            best[side] = {k: min(v, best.get(side, run)[k]) for k, v in run.items()}
    for side, figures in best.items():
        shown = ", ".join(f"{k} {v:.0f}" for k, v in figures.items())
        print(f"{args.rows} rows x {args.tokens} tokens, {side} OrderValidator: {shown}")
    if args.results:
        figures = {"rows": args.rows, "tokens": args.tokens, "repeats": args.repeats, **best}
        print(f"wrote {write_results('validator_memory', figures, command_line())}")


if __name__ == "__main__":
    main()

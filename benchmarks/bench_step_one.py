"""What ``OrderValidator()`` adds before the first optimizer step, step-1 observation included (#43).

A zero-glue fine-tuning shape: ``--rows`` padded rows of made-up token ids (a prompt, an answer, an
end-of-text id; completion-only labels) served by a plain ``LightningDataModule``, and a tiny
``LlamaForCausalLM`` from a config trained on ``model(**batch).loss``. ``fit`` runs one step
without and with the validator, ``--pairs`` alternating pairs, one torch thread. Printed per side:
the seconds from ``fit`` to step 1's ``on_before_optimizer_step`` (everything the validator does
before step 1), and the seconds of step 1 alone (from its batch start to that hook: the
observer's hooks and copies), and the medians added.

Run: ``python benchmarks/bench_step_one.py --rows 512 --pairs 3 [--results]`` (about 20 s;
``--results`` writes ``benchmarks/results/step_one.json``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from figures import command_line, write_results
from torch.utils.data import DataLoader

from lightning_order import OrderValidator

VOCAB, EOS = 512, 2


class _Clock(pl.Callback):
    """Notes when step 1 starts and when its optimizer step is about to run."""

    def __init__(self) -> None:
        self.batch = self.optimizer = float("nan")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 0:
            self.batch = time.perf_counter()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step == 0:
            self.optimizer = time.perf_counter()


class _Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        )  # fmt: skip
        self.model = LlamaForCausalLM(config)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.model(**batch).loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class _Data(pl.LightningDataModule):
    def __init__(self, rows: int) -> None:
        super().__init__()
        rng = np.random.default_rng(0)
        self.items = [
            (rng.integers(3, VOCAB, int(rng.integers(8, 64))).tolist(), rng.integers(3, VOCAB, 32).tolist())
            for _ in range(rows)
        ]

    @staticmethod
    def collate(items: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        rows = [[*p, *a, EOS] for p, a in items]
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
        for n, ((prompt, _), row) in enumerate(zip(items, rows)):
            ids[n, : len(row)], mask[n, : len(row)] = torch.tensor(row), 1
            labels[n, len(prompt) : len(row)] = torch.tensor(row[len(prompt) :])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.items, 16, shuffle=True, collate_fn=self.collate)


def timed(rows: int, validate: bool) -> tuple[float, float]:
    """``(seconds from fit to step 1's optimizer step, seconds of step 1)``."""
    pl.seed_everything(0, verbose=False)
    clock = _Clock()
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
        callbacks=[clock, *([OrderValidator()] if validate else [])],
    )  # fmt: skip
    module, data = _Module(), _Data(rows)
    start = time.perf_counter()
    trainer.fit(module, data)
    return clock.optimizer - start, clock.optimizer - clock.batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/step_one.json, the figures the docs quote"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    timed(args.rows, True)  # warm-up: imports and first-call costs out of the pairs
    without, with_ = [], []
    for _ in range(args.pairs):
        without.append(timed(args.rows, False))
        with_.append(timed(args.rows, True))
    for name, side in (("without", without), ("with", with_)):
        print(
            f"{name:8s} to step 1's optimizer step: {[round(s, 3) for s, _ in side]} s; step 1: {[round(s, 4) for _, s in side]} s"
        )
    added = statistics.median(w[0] - o[0] for w, o in zip(with_, without))
    step = statistics.median(w[1] - o[1] for w, o in zip(with_, without))
    print(
        f"added before step 1 (median of {args.pairs} pairs): {added:+.3f} s; of which step 1 itself: {step:+.4f} s"
    )
    if args.results:
        figures = {
            "rows": args.rows,
            "pairs": args.pairs,
            "without_s": statistics.median(s for s, _ in without),
            "with_s": statistics.median(s for s, _ in with_),
            "added_s": added,
            "step_one_without_s": statistics.median(s for _, s in without),
            "step_one_added_s": step,
        }
        print(f"wrote {write_results('step_one', figures, command_line())}")


if __name__ == "__main__":
    main()

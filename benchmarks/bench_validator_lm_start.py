"""What ``OrderValidator()`` adds before step 1 on the LM demo's data and model (#37).

The demo corpus is prepared once (untimed) into a fresh cache, or the cache given as the first
argument; then ``fit`` runs to its first train batch without and with the validator, three
alternating pairs, one torch thread. Printed: the seconds from ``fit`` to the first batch of each
pair and the median added.

Run: ``python benchmarks/bench_validator_lm_start.py [CACHE_DIR] [--results]`` (about 10 s with the
corpus prepared; about 30 s more the first time; ``--results`` writes
``benchmarks/results/validator_lm_start.json``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

import pytorch_lightning as pl
import torch
from figures import command_line, write_results

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderValidator


class _FirstBatch(pl.Callback):
    """Notes when the first train batch starts."""

    def __init__(self) -> None:
        self.at = float("nan")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.at = time.perf_counter()


def seconds_to_first_batch(cache: str, validate: bool) -> float:
    """From ``trainer.fit`` to the first train batch, with or without ``OrderValidator()``."""
    dm = OrderedLMDataModule(vocab_size=1024, block_size=128, batch_size=16, cache_dir=cache)
    model = OrderedCausalLM(**dm.dims, n_layer=2, n_head=4, n_embd=128)
    first = _FirstBatch()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[first, *([OrderValidator()] if validate else [])],
    )
    start = time.perf_counter()
    trainer.fit(model, dm)
    return first.at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache", nargs="?", default=None, help="the prepared corpus (default: a fresh temp dir)")
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/validator_lm_start.json, the figures the docs quote",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    cache = args.cache or tempfile.mkdtemp()
    seconds_to_first_batch(cache, validate=False)  # prepares the corpus: untimed
    pairs = [(seconds_to_first_batch(cache, False), seconds_to_first_batch(cache, True)) for _ in range(3)]
    print("without, with, added (s):", [(round(a, 3), round(b, 3), round(b - a, 3)) for a, b in pairs])
    print(f"median added before step 1: {statistics.median(b - a for a, b in pairs):.3f} s")
    if args.results:
        figures = {
            "pairs": len(pairs),
            "without_s": statistics.median(a for a, _ in pairs),
            "with_s": statistics.median(b for _, b in pairs),
            "added_s": statistics.median(b - a for a, b in pairs),
        }
        print(f"wrote {write_results('validator_lm_start', figures, command_line())}")


if __name__ == "__main__":
    main()

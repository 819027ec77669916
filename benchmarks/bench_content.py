"""What the validator's no-glue content checks cost on a plain datamodule, against one epoch of its loader.

A map-style dataset of dict items (``input_ids`` 64 long, ``numeric`` 3 floats, ``labels``), train
and a tenth as validation; ``summarize_splits`` hashes every item up to ``whole_rows`` (20 000)
and a 512-item sample above. The reference is one pass of the train DataLoader (batch 64) in the
same process, so the ratio holds on a shared machine where absolute times do not.

    python benchmarks/bench_content.py [--results]   # --results: benchmarks/results/content.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from figures import command_line, write_results
from torch.utils.data import DataLoader

from lightning_order.callbacks.validator.content import dataset_lengths, summarize_splits


class _Plain:
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        ids, numeric = torch.randint(1, 5000, (n, 64), generator=g), torch.randn(n, 3, generator=g)
        self.rows = [
            {"input_ids": ids[i], "numeric": numeric[i], "labels": torch.tensor(i % 4)} for i in range(n)
        ]
        self.val = self.rows[: n // 10]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.rows, batch_size=64)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/content.json, the figures the docs quote"
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for n in (20_000, 200_000):
        dm = _Plain(n)
        start = time.perf_counter()
        summary = summarize_splits(dm, dataset_lengths(dm), sample_rows=512, whole_rows=20_000)
        content = time.perf_counter() - start
        start = time.perf_counter()
        for _ in dm.train_dataloader():
            pass
        epoch = time.perf_counter() - start
        print(
            f"train {n:>7} items (hashed whole: {summary['train']['whole']}): content summary {content:.2f} s, "
            f"one loader epoch {epoch:.2f} s, ratio {content / epoch:.2f}"
        )
        results[str(n)] = {"whole": bool(summary["train"]["whole"]), "content_s": content, "epoch_s": epoch,
                           "ratio": content / epoch}  # fmt: skip
    if args.results:
        print(f"wrote {write_results('content', results, command_line())}")


if __name__ == "__main__":
    main()

"""What the resumable train loader costs per step, side by side with the loader it replaced, in one run.

Two loaders read the same packed blocks (``BlockDataset`` over an int32 ``n × (block_size + 1)``
array, as ``OrderedLMDataModule`` serves them) with the same collate function and batch size:

* **before**: the train loader of earlier versions (``make_loader``: a ``DataLoader`` with a
  one-replica seeded ``DistributedSampler`` over this rank's shard);
* **resumable**: today's (``make_train_loader``: a ``ResumableLoader`` with a
  ``GlobalOrderSampler`` over the whole split, counting the batches it hands out).

Both are iterated for ``--epochs`` epochs (``set_epoch`` before each, as Lightning does), batch by
batch in alternation, the one going first drawn at random each batch, so both share one process,
one cache state and the same machine load. Each ``next()`` is timed on the wall clock and on this
thread's CPU clock; the first batch of an epoch (where each sampler makes that epoch's order) is
included, so the per-epoch permutation is paid in the figure. The overhead is the difference of the
two mean batch times (spikes over 3× the median dropped), in microseconds and as a share of a 2 ms
training step; each figure is the median over ``--repeats`` runs with a 95 % bootstrap interval.

It also times what a checkpoint costs the loader (``state_dict()``: the position and the digest of
the epoch's order; once per checkpoint, not per step).

Example:
    python benchmarks/bench_resume.py --blocks 200000 --batch-size 32 --epochs 3 --repeats 7 --json bench_resume.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch
from figures import write_results

from lightning_order.data.engine.loaders import make_loader, make_train_loader
from lightning_order.data.lm.datamodule import BlockDataset, collate_blocks
from lightning_order.positions import GlobalOrder

#: The training step the overhead is measured against.
STEP_MS = 2.0
SIDES = ("before", "resumable")


def _loaders(blocks: np.ndarray, batch_size: int, workers: int) -> dict[str, Any]:
    data = BlockDataset(blocks)
    order = GlobalOrder(len(blocks), batch_size, seed=0)
    return {
        "before": make_loader(data, batch_size, True, 0, workers, collate_blocks),
        "resumable": make_train_loader(data, order, workers, collate_blocks),
    }


def _clean_mean(values: list[float], spike: float = 3.0) -> float:
    """The mean without preemption spikes (values over ``spike`` × the median)."""
    median = statistics.median(values)
    return statistics.fmean(v for v in values if v <= spike * median)


def _run(blocks: np.ndarray, batch_size: int, epochs: int, workers: int, seed: int) -> dict[str, Any]:
    """One run: both loaders, batch by batch in a random alternation; mean batch times in µs."""
    loaders, rng = _loaders(blocks, batch_size, workers), random.Random(seed)
    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    for epoch in range(epochs):
        for loader in loaders.values():
            loader.sampler.set_epoch(epoch)
        iterators = {side: iter(loader) for side, loader in loaders.items()}
        for _ in range(len(loaders["before"])):
            for side in rng.sample(SIDES, 2):
                start, start_cpu = time.perf_counter(), time.thread_time()
                next(iterators[side])
                wall[side].append((time.perf_counter() - start) * 1e6)
                cpu[side].append((time.thread_time() - start_cpu) * 1e6)
    start = time.perf_counter()
    for _ in range(20):
        loaders["resumable"].state_dict()
    checkpoint_us = (time.perf_counter() - start) / 20 * 1e6
    return {
        "wall_us": {side: _clean_mean(wall[side]) for side in SIDES},
        "cpu_us": {side: _clean_mean(cpu[side]) for side in SIDES},
        "batches": len(wall["before"]),
        "state_dict_us": checkpoint_us,
    }


def _median_interval(values: list[float], resamples: int = 4000) -> list[float]:
    """A 95 % percentile-bootstrap interval of the median of ``values`` (seeded), rounded outwards to 0.01."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    low, high = medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]
    return [math.floor(low * 100) / 100, math.ceil(high * 100) / 100]


def bench(blocks: int, block_size: int, batch_size: int, epochs: int, repeats: int, workers: int = 0) -> dict:
    """The resumable loader's per-batch overhead over the loader it replaced, median of ``repeats`` runs."""
    torch.manual_seed(0)
    data = np.random.default_rng(0).integers(0, 50_000, size=(blocks, block_size + 1), dtype=np.int32)
    _run(data[: 4 * batch_size], batch_size, 1, workers, seed=-1)  # warm-up: imports, allocator
    runs = [_run(data, batch_size, epochs, workers, seed=r) for r in range(repeats)]
    out: dict[str, Any] = {
        "blocks": blocks,
        "block_size": block_size,
        "batch_size": batch_size,
        "epochs": epochs,
        "workers": workers,
        "repeats": repeats,
        "batches_per_run": runs[0]["batches"],
    }
    for clock in ("wall_us", "cpu_us"):
        before = [r[clock]["before"] for r in runs]
        after = [r[clock]["resumable"] for r in runs]
        extra = [a - b for a, b in zip(after, before)]
        share = [100 * e / (STEP_MS * 1000) for e in extra]
        out[clock] = {
            "before": round(statistics.median(before), 2),
            "resumable": round(statistics.median(after), 2),
            "overhead_us": round(statistics.median(extra), 2),
            "overhead_us_interval": _median_interval(extra),
            "percent_of_2ms_step": round(statistics.median(share), 3),
            "percent_interval": _median_interval(share),
        }
    out["state_dict_us"] = round(statistics.median(r["state_dict_us"] for r in runs), 1)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=200_000, help="packed blocks in the train split")
    parser.add_argument("--block-size", type=int, default=128, help="tokens per block (inputs)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workers", type=int, default=0, help="loader workers (0: all work in this process)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/resume.json, the figures the docs quote"
    )
    args = parser.parse_args(argv)
    result = bench(args.blocks, args.block_size, args.batch_size, args.epochs, args.repeats, args.workers)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text + "\n")
    if args.results:
        flat: dict[str, Any] = {k: v for k, v in result.items() if isinstance(v, (int, float))}
        for clock, row in result.items():
            for key, value in row.items() if isinstance(row, dict) else ():
                name = f"{clock.removesuffix('_us')}_{key}"
                if isinstance(value, list):  # an interval: its two ends
                    flat[f"{name}_low"], flat[f"{name}_high"] = value
                else:
                    flat[name] = value
        command = "python benchmarks/bench_resume.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_results("resume", flat, command.strip())
    return result


if __name__ == "__main__":
    main()

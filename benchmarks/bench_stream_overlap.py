"""Overlap on an iterable train split: what a token budget reads of the stream, what it finds, what it costs.

The validator reads an iterable train split on a copy up to a token budget
(:data:`~lightning_order.callbacks.validator.reading.STREAM_TOKENS`, 4M by default) and checks every
validation window against the tokens read (docs/validator.md, "Iterable splits"). This measures,
for train streams of ``--train-tokens`` and budgets of ``--budget-shares`` of them:

- **power**: validation documents replaced by copies of train documents drawn uniformly from the
  whole stream (a dedup made after the split) until ``--shares`` of the validation windows lie in
  twins; ``--seeds`` corpora each (bench_window_overlap.py's generator: Zipf ids, end-of-text id 0,
  a third of the documents ending with one of three shared 80-token footers, so the ``0`` row is
  the false-alarm rate). Detected: ``train-val-overlap`` raised at ``--threshold``; the share found
  against the share planted times the share of train read (the expected lower bound);
- **cost**: the read (:func:`~lightning_order.callbacks.validator.reading.read_split_tokens`
  over a torchtitan-style ``IterableDataset`` yielding ``(x, y)`` windows of 33 tokens) plus the
  check, beside one plain iteration of the same stream's windows up to the same budget (what
  reading the stream costs any consumer, the floor), median over the seeds.

Last, with ``--served-repeats``: what reading the train loader's workers on a copy costs
(:func:`~lightning_order.callbacks.validator.content.rows_served_twice`, ``rows-served-twice``) on a
2-worker loader of an ``IterableDataset`` split by ``get_worker_info()``, beside the same loader's
own start and its first 256 rows, median of the repeats.

With ``--seam-seeds``: why a random split of tests/nanogpt.py's token blocks held as two arrays of
rows is not reported: the seam statistic (:func:`~lightning_order.checks.block_seams.seam_z` at the
block length) of the train rows joined, for the blocks split at random (rows in random order), a
correct split whose blocks are stored shuffled, and a correct split in order.

Example:
    PYTHONPATH=$PWD python benchmarks/bench_stream_overlap.py --train-tokens 4000000 \
        --budget-shares 0.1 0.25 0.5 1 --shares 0 0.05 0.2 0.5 --seeds 3 --json /tmp/bench_stream_overlap.json
    PYTHONPATH=$PWD python benchmarks/bench_stream_overlap.py --shares --served-repeats 7
    PYTHONPATH=$PWD python benchmarks/bench_stream_overlap.py --shares --seam-seeds 4

``--results`` writes ``benchmarks/results/stream_overlap.json``, the figures the docs quote: each
cell as ``read_<budget %>.planted_<share %>.<figure>`` (``read_25.planted_5.found``), the cost
ratio's median, least and most over the cells (``ratio``), the false alarms of the correct runs,
``served.*`` and ``seams.<seed>.*`` when measured, and the machine's load average before and after
(the timings move with it; the ratios much less).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from bench_window_overlap import EOS, WINDOW, corpus
from figures import command_line, write_results

from lightning_order.callbacks.validator.content import rows_served_twice
from lightning_order.callbacks.validator.reading import read_split_tokens
from lightning_order.checks.block_seams import seam_z
from lightning_order.checks.windows import check_window_overlap, window_overlap

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]
import nanogpt  # noqa: E402  (tests/nanogpt.py: the corpus of the seam figures)


class _Stream(torch.utils.data.IterableDataset):
    """A torchtitan-style stream: ``(x, y)`` windows of ``WINDOW`` tokens of a token array, in order."""

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens

    def __iter__(self):
        for start in range(0, self.tokens.size - WINDOW + 1, WINDOW):
            chunk = torch.from_numpy(self.tokens[start : start + WINDOW].astype(np.int64))
            yield chunk[:-1], chunk[1:]


class _Splits:
    """What the validator reads: the splits' loaders."""

    def __init__(self, train: np.ndarray, val: np.ndarray) -> None:
        self.train, self.val = _Stream(train), _Stream(val)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.train, batch_size=8)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(self.val, batch_size=8)


def _floor(stream: _Stream, budget: int) -> float:
    """Seconds of one plain iteration of the stream's windows up to ``budget`` tokens."""
    start, read = time.perf_counter(), 0
    for x, _ in stream:
        read += x.numel() + 1
        if read >= budget:
            break
    return time.perf_counter() - start


class _WorkerShards(torch.utils.data.IterableDataset):
    """``(x, y)`` windows of a token array, every ``num_workers``-th one per worker (split correctly)."""

    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        share, of = (info.id, info.num_workers) if info is not None else (0, 1)
        for n, start in enumerate(range(0, self.tokens.size - WINDOW + 1, WINDOW)):
            if n % of == share:
                chunk = torch.from_numpy(self.tokens[start : start + WINDOW].astype(np.int64))
                yield chunk[:-1], chunk[1:]


def served_cost(repeats: int) -> dict:
    """Seconds of the workers' read on a copy, beside the loader's own start and first 256 rows."""
    tokens = np.random.default_rng(0).integers(1, 50_000, size=1_000_000)
    checks, plain = [], []
    for _ in range(repeats):
        loader = torch.utils.data.DataLoader(_WorkerShards(tokens), batch_size=8, num_workers=2)
        start = time.perf_counter()
        found = rows_served_twice(SimpleNamespace(train_dataloader=loader, world_size=1))
        checks.append(time.perf_counter() - start)
        assert found == ([], []), found
        start = time.perf_counter()
        batches = iter(loader)
        for _ in range(256 // 8):
            next(batches)
        del batches
        plain.append(time.perf_counter() - start)
    check, own = statistics.median(checks), statistics.median(plain)
    return {"check_s": check, "loader_s": own, "ratio": check / own}


def seams(seeds: int) -> list[dict]:
    """``seam_z`` of the joined train rows: blocks split at random, a correct split shuffled, a correct split in order."""
    out = []
    with tempfile.TemporaryDirectory() as folder:
        nanogpt.prepare(Path(folder))
        train = np.fromfile(Path(folder) / "train.bin", dtype=np.uint16).astype(np.int64)
        val = np.fromfile(Path(folder) / "val.bin", dtype=np.uint16).astype(np.int64)
    width = nanogpt.BLOCK + 1
    both = np.concatenate([train, val])
    blocks = both[: both.size // width * width].reshape(-1, width)
    own = train[: train.size // width * width].reshape(-1, width)
    for seed in range(seeds):
        order = np.random.default_rng(seed).permutation(len(blocks))
        picked = blocks[order[: int(0.9 * len(blocks))]]
        shuffled = own[np.random.default_rng(seed).permutation(len(own))]
        out.append(
            {
                "seed": seed,
                "random_split": seam_z(picked.ravel(), width),
                "correct_shuffled": seam_z(shuffled.ravel(), width),
                "correct_in_order": seam_z(own.ravel(), width),
            }
        )
    return out


def measure(train: np.ndarray, val: np.ndarray, budget: int, threshold: float) -> dict:
    splits = _Splits(train, val)
    start = time.perf_counter()
    train_read = read_split_tokens(splits, "train", max_tokens=budget)
    val_read = read_split_tokens(splits, "val")
    assert train_read is not None and val_read is not None
    result = window_overlap(val_read.tokens, [train_read.tokens], WINDOW, separators=[EOS])
    found = check_window_overlap(result, threshold=threshold, train_whole=train_read.whole)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "floor_s": _floor(splits.train, budget),
        "read_tokens": int(train_read.tokens.size),
        "detected": bool(found),
        "rate": result.rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-tokens", type=int, default=4_000_000)
    parser.add_argument("--val-tokens", type=int, default=200_000)
    parser.add_argument("--budget-shares", type=float, nargs="+", default=[0.1, 0.25, 0.5, 1.0])
    parser.add_argument("--shares", type=float, nargs="*", default=[0.0, 0.05, 0.2, 0.5])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.01)
    parser.add_argument("--served-repeats", type=int, default=0)
    parser.add_argument("--seam-seeds", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/stream_overlap.json, the figures the docs quote"
    )
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    rows: list[dict] = []
    if args.served_repeats:
        served = served_cost(args.served_repeats)
        rows.append({"served": served})
        print(
            f"rows-served-twice read (2 workers, 256 rows): {served['check_s']:.3f} s; the loader's own start "
            f"and first 256 rows: {served['loader_s']:.3f} s (x{served['ratio']:.2f})"
        )
    for row in seams(args.seam_seeds) if args.seam_seeds else []:
        rows.append({"seams": row})
        print(
            f"seed {row['seed']}: z of the joined train rows, blocks split at random {row['random_split']:.1f}, "
            f"a correct split shuffled {row['correct_shuffled']:.1f}, in order {row['correct_in_order']:.1f}"
        )
    if args.shares:
        print(
            "| train read | planted | expected found (planted × read) | detected | share found | time | × one read |"
        )
        print("|---|---|---|---|---|---|---|")
    for share in args.shares:
        corpora = [
            corpus(np.random.default_rng(s), args.train_tokens, args.val_tokens, share)
            for s in range(args.seeds)
        ]
        for budget_share in args.budget_shares:
            budget = int(budget_share * args.train_tokens)
            runs = [measure(train, val, budget, args.threshold) for train, val, _ in corpora]
            read = float(np.mean([r["read_tokens"] for r in runs])) / float(
                np.mean([t.size for t, _, _ in corpora])
            )
            planted = float(np.mean([p for _, _, p in corpora]))
            seconds = float(np.median([r["seconds"] for r in runs]))
            floor = float(np.median([r["floor_s"] for r in runs]))
            row = {
                "train_tokens": args.train_tokens,
                "budget": budget,
                "read_share": read,
                "planted": planted,
                "expected": planted * min(1.0, read),
                "detected": float(np.mean([r["detected"] for r in runs])),
                "found": float(np.mean([r["rate"] for r in runs])),
                "seconds": seconds,
                "ratio": seconds / floor if floor else float("nan"),
            }
            rows.append(row)
            print(
                f"| {read:.0%} ({budget:,} tokens) | {planted:.1%} | {row['expected']:.2%} | {row['detected']:.0%} | "
                f"{row['found']:.2%} | {seconds:.2f} s | {row['ratio']:.1f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        figures = summary(rows, args)
        figures["load"] = {"before": load_before, "after": os.getloadavg()[0]}
        print(f"wrote {write_results('stream_overlap', figures, command_line())}")


def _percent(share: float) -> str:
    return f"{share * 100:g}".replace(".", "_")


def summary(rows: list[dict], args: argparse.Namespace) -> dict:
    """The figures the docs quote, from the printed rows: each cell by its budget and planted share
    (both in per cent of the command's arguments), and the cost ratio over all cells."""
    cells = [r for r in rows if "budget" in r]
    found: dict = {
        "train_tokens": args.train_tokens,
        "val_tokens": args.val_tokens,
        "seeds": args.seeds,
        "threshold": args.threshold,
    }
    for row, (share, budget_share) in zip(
        cells, [(s, b) for s in args.shares for b in args.budget_shares], strict=True
    ):
        found[f"read_{_percent(budget_share)}.planted_{_percent(share)}"] = row
    if cells:
        ratios = [r["ratio"] for r in cells]
        found["ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        correct = [r for r in cells if r["planted"] == 0]
        found["correct_runs"] = len(correct) * args.seeds
        found["false_alarms"] = round(sum(r["detected"] for r in correct) * args.seeds)
    for row in rows:
        if "served" in row:
            found["served"] = row["served"]
        if "seams" in row:
            found.setdefault("seams", {})[str(row["seams"]["seed"])] = row["seams"]
    return found


if __name__ == "__main__":
    main()

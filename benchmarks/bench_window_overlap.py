"""The window-overlap check's power and cost: planted twin documents at several sizes, and 1 B tokens.

For each train size (in windows: a nanoGPT-style split of N tokens has N stride-1 windows) and
each planted share, ``--seeds`` corpora are generated (documents of 40-400 random token ids from
a 50 000-token vocabulary, Zipf-distributed, each ended by end-of-text id 0). The validation split
has ``--val-share`` of the train size (at least ``--min-val-tokens``, so that one document is
under half a per cent of its windows); validation documents are replaced by copies of train
documents until the planted share of validation windows lies inside a twin document. Every
corpus also carries shared footers (a third of the documents in both splits end with one of three
80-token phrases, longer than two windows): a correct pipeline must stay silent, which the
``0 %`` row measures (its detected rate is the false-alarm rate).

Timed: :func:`~lightning_order.checks.windows.window_overlap` (hash every validation n-gram, one
pass over all train tokens in chunks, the twin decision), beside a floor measured in the same run
on the same array: one read of every train token (``tokens.sum()``). The 1 B-token figure is
extrapolated from the per-token cost measured on ``--extrapolate-tokens`` train tokens (a full
run at 1 B needs 2 GB for the uint16 tokens alone; said so in the output). Last, the time
``OrderValidator()`` adds before step 1 on a nanoGPT-style run (``train.bin`` / ``val.bin``
memory maps read as every window, a two-layer model), median of ``--fit-start-repeats`` runs
with and without it, alternating, at each ``--fit-start-tokens``.

Example:
    python benchmarks/bench_window_overlap.py --sizes 10000 100000 1000000 --shares 0 0.01 0.05 0.2 \
        --seeds 20 --extrapolate-tokens 20000000 --fit-start-tokens 1000000 10000000 \
        --json /tmp/bench_window_overlap.json
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from figures import command_line, write_results
from torch.utils.data import DataLoader

from lightning_order import OrderValidator
from lightning_order.checks.windows import check_window_overlap, window_overlap

warnings.filterwarnings("ignore")
logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

EOS = 0
WINDOW = 33  # block_size 32, as tests/nanogpt.py
VOCAB = 50_000
CHUNK = 1 << 23


def _documents(rng: np.random.Generator, tokens: int, footers: list[np.ndarray]) -> list[np.ndarray]:
    cdf = np.cumsum(1.0 / np.arange(1, VOCAB))
    cdf /= cdf[-1]
    docs, total = [], 0
    while total < tokens:
        doc = 1 + np.searchsorted(cdf, rng.random(int(rng.integers(40, 400))))
        if rng.random() < 1 / 3:
            doc = np.r_[doc, footers[int(rng.integers(3))]]
        docs.append(doc)
        total += doc.size + 1
    return docs


def _stream(docs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.r_[d, EOS] for d in docs]).astype(np.uint16 if VOCAB < 65536 else np.int32)


def corpus(rng: np.random.Generator, train_tokens: int, val_tokens: int, share: float) -> tuple:
    """``(train, val, planted)``: token streams, and the share of validation windows planted in twins."""
    footers = [rng.integers(1, VOCAB, size=80) for _ in range(3)]
    train_docs = _documents(rng, train_tokens, footers)
    val_docs = _documents(rng, val_tokens, footers)
    windows = sum(d.size + 1 for d in val_docs) - WINDOW + 1
    planted, order = 0, rng.permutation(len(val_docs))
    sizes = np.array([d.size for d in train_docs])
    for i in order:  # replace documents until the planted windows reach the share, not beyond
        need = share * windows - planted
        if need <= 0:
            break
        fits = np.flatnonzero(sizes + 2 - WINDOW <= need)
        pick = int(rng.choice(fits)) if fits.size else int(np.argmin(sizes))
        val_docs[i] = train_docs[pick]
        planted += max(0, int(sizes[pick]) + 2 - WINDOW)
    return _stream(train_docs), _stream(val_docs), planted / max(windows, 1)


def _chunks(tokens: np.ndarray):
    for start in range(0, tokens.size, CHUNK):
        yield tokens[start : start + CHUNK]


def measure(train: np.ndarray, val: np.ndarray, threshold: float) -> dict:
    start = time.perf_counter()
    floor = int(train.sum(dtype=np.uint64))  # one read of every train token: the floor
    floor_s = time.perf_counter() - start
    start = time.perf_counter()
    result = window_overlap(val, _chunks(train), WINDOW, separators=[EOS])
    found = check_window_overlap(result, threshold=threshold)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "floor_s": floor_s, "detected": bool(found), "rate": result.rate, "_": floor}


class _Windows(torch.utils.data.Dataset):
    """nanoGPT's data: every window of ``WINDOW`` tokens of a memory-mapped ``.bin``."""

    def __init__(self, path: Path) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self) -> int:
        return len(self.data) - WINDOW

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = torch.from_numpy(self.data[i : i + WINDOW].astype(np.int64))
        return chunk[:-1], chunk[1:]


class _Data(pl.LightningDataModule):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def setup(self, stage: str) -> None:
        self.train_set, self.val_set = _Windows(self.folder / "train.bin"), _Windows(self.folder / "val.bin")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=8)


class _Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(self.embed(x)).flatten(0, 1), y.flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _FirstStep(pl.Callback):
    def __init__(self) -> None:
        self.at: float | None = None

    def on_train_batch_start(self, *args: object) -> None:
        self.at = self.at or time.perf_counter()


def before_step_one(train_tokens: int, repeats: int) -> dict:
    """Seconds from ``trainer.fit`` to step 1 with and without ``OrderValidator()``, alternating."""
    rng = np.random.default_rng(0)
    train, val, _ = corpus(rng, train_tokens, max(train_tokens // 10, 50_000), 0.0)
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        train.tofile(Path(folder) / "train.bin")
        val.tofile(Path(folder) / "val.bin")
        for _ in range(repeats):
            for validate in (False, True):
                first = _FirstStep()
                callbacks = [first, OrderValidator()] if validate else [first]
                trainer = pl.Trainer(
                    max_steps=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                )  # fmt: skip
                start = time.perf_counter()
                trainer.fit(_Model(), _Data(Path(folder)))
                times[validate].append((first.at or time.perf_counter()) - start)
    without, with_ = float(np.median(times[False])), float(np.median(times[True]))
    return {
        "train_tokens": int(train.size),
        "without_s": without,
        "with_s": with_,
        "added_s": with_ - without,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.01, 0.05, 0.2])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--val-share", type=float, default=0.1)
    parser.add_argument("--min-val-tokens", type=int, default=50_000)
    parser.add_argument("--threshold", type=float, default=0.01)
    parser.add_argument("--extrapolate-tokens", type=int, default=20_000_000)
    parser.add_argument("--fit-start-tokens", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--fit-start-repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/window_overlap.json, the figures the docs quote"
    )
    args = parser.parse_args()

    rows = []
    print(
        f"{'train windows':>13} {'planted':>8} {'detected':>9} {'rate seen':>10} {'time s':>8} {'x floor':>8}"
    )
    for size in args.sizes:
        for share in args.shares:
            runs = []
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                train, val, planted = corpus(
                    rng, size, max(int(size * args.val_share), args.min_val_tokens), share
                )
                runs.append({**measure(train, val, args.threshold), "planted": planted})
            row = {
                "train_windows": size,
                "planted": share,
                "planted_measured": float(np.mean([r["planted"] for r in runs])),
                "detected": float(np.mean([r["detected"] for r in runs])),
                "rate_seen": float(np.mean([r["rate"] for r in runs])),
                "seconds": float(np.median([r["seconds"] for r in runs])),
                "ratio_to_floor": float(np.median([r["seconds"] / max(r["floor_s"], 1e-9) for r in runs])),
                "seeds": args.seeds,
            }
            rows.append(row)
            print(
                f"{size:>13} {share:>8.0%} {row['detected']:>9.0%} {row['rate_seen']:>10.2%} "
                f"{row['seconds']:>8.3f} {row['ratio_to_floor']:>8.1f}"
            )

    rng = np.random.default_rng(0)
    train, val, _ = corpus(rng, args.extrapolate_tokens, args.extrapolate_tokens // 100, 0.05)
    timing = measure(train, val, args.threshold)
    per_token = timing["seconds"] / train.size
    extrapolated = {
        "measured_train_tokens": int(train.size),
        "val_tokens": int(val.size),
        "seconds": timing["seconds"],
        "ns_per_train_token": per_token * 1e9,
        "seconds_at_1B_train_tokens": per_token * 1e9,
        "ratio_to_floor": timing["seconds"] / max(timing["floor_s"], 1e-9),
        "extrapolated": True,
    }
    print(
        f"\n{train.size} train tokens, {val.size} validation tokens: {timing['seconds']:.2f} s "
        f"({per_token * 1e9:.1f} ns per train token, {extrapolated['ratio_to_floor']:.0f}x one read of them); "
        f"extrapolated (not run) to 1 B train tokens: {per_token * 1e9:.0f} s"
    )
    fit_start = []
    for tokens in args.fit_start_tokens:
        fit_start.append(before_step_one(tokens, args.fit_start_repeats))
        f = fit_start[-1]
        print(
            f"nanoGPT-style run, {f['train_tokens']} train tokens: step 1 after {f['without_s']:.2f} s without, "
            f"{f['with_s']:.2f} s with OrderValidator(): +{f['added_s']:.2f} s before step 1"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "one_billion": extrapolated, "fit_start": fit_start}, indent=2)
        )
    if args.results:
        # keyed by what a reader looks up: "<train windows>.<planted share in %>", "<train tokens>"
        keyed = {
            "rows": {f"{r['train_windows']}.{round(100 * r['planted'])}": r for r in rows},
            "one_billion": extrapolated,
            "fit_start": {str(f["train_tokens"]): f for f in fit_start},
        }
        print(f"wrote {write_results('window_overlap', keyed, command_line())}")


if __name__ == "__main__":
    main()

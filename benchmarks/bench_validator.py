"""What OrderValidator costs: per training step, and once at fit start.

Two measurements, printed as a table and written as JSON:

1. Per-step overhead, side by side in the same run: a small MLP is fitted for ``--steps`` steps
   with the validator in the callback list on every other step only (it ran its fit-start checks
   before step 1). A timing callback takes the wall time of each step; each run gives the median
   step time with and without, and the overhead is the median over ``--repeats`` runs of their
   relative difference.
2. Fit-start check time at each ``--sizes`` row count, on synthetic data shaped like a real run:
   a full ledger, int64 key hashes for train and validation (90/10) in an Arrow dataset sharded
   with ``select`` like ``OrderedDataModule``'s, the rank summaries of ``--ranks`` ranks, model and
   data dims, stored and current fingerprints. Timed: reading the key-hash columns, each check,
   and their sum (median of ``--repeats``).

Example:
    python benchmarks/bench_validator.py --sizes 10000 100000 1000000 --json bench_validator.json
    python benchmarks/bench_validator.py --sizes 10000 100000 1000000 --results   # benchmarks/results/validator.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytorch_lightning as pl
import torch
from figures import command_line, write_results
from pytorch_lightning.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_order import OrderValidator
from lightning_order.callbacks.validator.reading import split_key_hashes
from lightning_order.checks import (
    check_key_overlap,
    check_ledger,
    check_model_dims,
    check_ranks,
    check_resume,
)
from lightning_order.ledger import StepLedger

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
datasets.disable_progress_bars()


# -- 1. per-step overhead ----------------------------------------------------------------------
class _SideBySide(Callback):
    """Times every step, and puts the validator in the callback list on every other step only.

    Both sides share one run (same process, data, allocator state and machine load), so drift on
    a busy machine cancels out; the validator still ran its fit-start checks before step 1. Each
    step is timed twice: wall clock, and CPU time of this thread (torch runs single-threaded here),
    which other processes on a shared machine cannot inflate.
    """

    def __init__(self, validator: Callback) -> None:
        self.validator = validator
        self.wall: dict[bool, list[float]] = {True: [], False: []}
        self.cpu: dict[bool, list[float]] = {True: [], False: []}
        self._start = (0.0, 0.0)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._start = (time.perf_counter(), time.thread_time())

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        wall, cpu = time.perf_counter() - self._start[0], time.thread_time() - self._start[1]
        present = self.validator in trainer.callbacks
        if trainer.global_step > 5:  # the first steps warm up allocators
            self.wall[present].append(wall)
            self.cpu[present].append(cpu)
        if present:
            trainer.callbacks.remove(self.validator)
        else:
            trainer.callbacks.append(self.validator)


class _MLP(pl.LightningModule):
    def __init__(self, num_features: int = 64, num_classes: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(num_features, 256),
            nn.ReLU(),
            nn.Linear(256, 256),
            nn.ReLU(),
            nn.Linear(256, num_classes),
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _DataModule(pl.LightningDataModule):
    def __init__(self, rows: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(
            torch.randn(rows, 64, generator=g), torch.randint(0, 4, (rows,), generator=g)
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=256, shuffle=True)


def _run(steps: int) -> dict[str, float]:
    validator = OrderValidator()
    timer = _SideBySide(validator)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[timer, validator],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(_MLP(), _DataModule(256 * steps))
    median = statistics.median
    return {
        "wall_without": median(timer.wall[False]),
        "wall_with": median(timer.wall[True]),
        "cpu_without": median(timer.cpu[False]),
        "cpu_with": median(timer.cpu[True]),
    }


def bench_overhead(steps: int, repeats: int) -> dict[str, Any]:
    torch.manual_seed(0)
    _run(20)  # warm-up run: imports, thread pools
    runs = [_run(steps) for _ in range(repeats)]
    result: dict[str, Any] = {"steps_per_run": steps, "repeats": repeats}
    for clock in ("cpu", "wall"):
        ratios = [(r[f"{clock}_with"] - r[f"{clock}_without"]) / r[f"{clock}_without"] for r in runs]
        result[f"{clock}_step_ms_without"] = 1e3 * statistics.median(r[f"{clock}_without"] for r in runs)
        result[f"{clock}_step_ms_with"] = 1e3 * statistics.median(r[f"{clock}_with"] for r in runs)
        result[f"{clock}_overhead_percent"] = 100 * statistics.median(ratios)
        result[f"{clock}_overhead_percent_runs"] = [round(100 * x, 2) for x in ratios]
    return result


# -- 2. fit-start checks -----------------------------------------------------------------------
def _ledger(rows: int) -> StepLedger:
    ledger = StepLedger(
        info={"dims": {"vocab_size": 8000, "num_features": 7, "num_classes": 4, "max_length": 128}}
    )
    load = ledger.record("load", stats={"rows": rows})
    clean = ledger.record("clean", inputs={"load": load.output})
    eng = ledger.record("engineer_features", inputs={"clean": clean.output})
    split = ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": eng.output},
        parts={"train": "T", "val": "V"},
    )
    fit = ledger.record("fit_features", inputs={"split": "T"}, fitted_on="T", stats={"mean": [0.0] * 7})
    vocab = ledger.record("build_vocab", inputs={"clean": clean.output, "split": "T"}, fitted_on="T")
    encode = ledger.record("encode", inputs={"fit_features": fit.output, "build_vocab": vocab.output})
    ledger.record("shard", inputs={"encode": encode.output}, stats={"length": rows // 2})
    assert split.parts["train"] == "T"
    return ledger


def _key_hash_splits(rows: int, folder: Path) -> tuple[datasets.Dataset, datasets.Dataset]:
    rng = np.random.default_rng(rows)
    hashes = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, rows, dtype=np.int64)
    n_val = rows // 10
    train = datasets.Dataset.from_dict({"key_hash": hashes[n_val:]})
    val = datasets.Dataset.from_dict({"key_hash": hashes[:n_val]})
    train.save_to_disk(str(folder / f"train{rows}"))
    val.save_to_disk(str(folder / f"val{rows}"))
    # Memory-mapped from disk, the train split sharded with select() as OrderedDataModule does.
    train = datasets.load_from_disk(str(folder / f"train{rows}"))
    half = len(train) // 2
    return train.select(range(half)).with_format("torch"), datasets.load_from_disk(str(folder / f"val{rows}"))


class _SplitsModule:
    """Stands in for a datamodule: dataloaders over the Arrow splits, as OrderedDataModule's."""

    def __init__(self, train: datasets.Dataset, val: datasets.Dataset) -> None:
        self.train, self.val = train, val

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=32)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=32)


def bench_checks(rows: int, ranks: int, repeats: int, folder: Path, max_rows: int) -> dict[str, Any]:
    ledger = _ledger(rows)
    train_ds, val_ds = _key_hash_splits(rows, folder)
    fps = {"manifest": "m" * 32, "split": "s" * 32, "statistics": "t" * 32, "vocab": "v" * 32}
    summaries = [
        {
            "rank": r,
            "fingerprints": fps,
            "shard_length": rows // ranks,
            "feature_mean": [0.0] * 7,
            "feature_std": [1.0] * 7,
            "feature_rows": 512,
        }
        for r in range(ranks)
    ]
    model = {"vocab_size": 8000, "num_features": 7, "num_classes": 4, "embedding_rows": 8000, "feature_in": 7}
    parts: dict[str, list[float]] = {
        k: [] for k in ("read_hashes", "ledger", "overlap", "ranks", "model", "resume")
    }
    for _ in range(repeats):
        t0 = time.perf_counter()
        dm = _SplitsModule(train_ds, val_ds)
        train, val = split_key_hashes(dm, "train"), split_key_hashes(dm, "val")
        t1 = time.perf_counter()
        assert check_ledger(ledger) == []
        t2 = time.perf_counter()
        assert check_key_overlap(train, val, max_rows=max_rows) == []
        t3 = time.perf_counter()
        assert check_ranks(summaries) == []
        t4 = time.perf_counter()
        assert check_model_dims(model, ledger.info["dims"]) == []
        t5 = time.perf_counter()
        assert check_resume(fps, dict(fps)) == []
        t6 = time.perf_counter()
        for key, (a, b) in zip(parts, [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6)]):
            parts[key].append(b - a)
    result = {f"{k}_ms": 1e3 * statistics.median(v) for k, v in parts.items()}
    result["total_ms"] = sum(result.values())
    result["rows"] = rows
    result["train_rows_read"] = len(train_ds)
    result["val_rows_read"] = len(val_ds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument(
        "--overlap-max-rows",
        type=int,
        default=None,
        help="OrderValidator's overlap_max_rows (default: its default)",
    )
    parser.add_argument("--ranks", type=int, default=8, help="rank summaries to compare")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="training steps per overhead run")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/validator.json, the figures the docs quote"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="for the Arrow files (default: a temp dir)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_validator_"))
    args.workdir.mkdir(parents=True, exist_ok=True)

    max_rows = args.overlap_max_rows or OrderValidator().overlap_max_rows
    results: dict[str, Any] = {"torch_threads": 1, "overlap_max_rows": max_rows, "checks": []}
    print(
        f"{'rows':>10} {'read hashes':>12} {'ledger':>8} {'overlap':>8} {'ranks':>7} {'model':>7} {'resume':>7} {'total':>8}  (ms)"
    )
    for rows in args.sizes:
        r = bench_checks(rows, args.ranks, args.repeats, args.workdir, max_rows)
        results["checks"].append(r)
        print(
            f"{rows:>10,} {r['read_hashes_ms']:>12.2f} {r['ledger_ms']:>8.2f} {r['overlap_ms']:>8.2f} "
            f"{r['ranks_ms']:>7.2f} {r['model_ms']:>7.3f} {r['resume_ms']:>7.3f} {r['total_ms']:>8.2f}"
        )
    if len(results["checks"]) > 1:
        first, last = results["checks"][0], results["checks"][-1]
        growth = last["total_ms"] / first["total_ms"]
        results["growth"] = {"rows_factor": last["rows"] / first["rows"], "time_factor": growth}
        print(f"rows ×{last['rows'] / first['rows']:g} -> check time ×{growth:.1f}")
    if not args.skip_overhead:
        o = bench_overhead(args.steps, args.repeats)
        results["overhead"] = o
        for clock in ("cpu", "wall"):
            print(
                f"per step ({clock} time): {o[f'{clock}_step_ms_without']:.3f} ms without, "
                f"{o[f'{clock}_step_ms_with']:.3f} ms with the validator: overhead "
                f"{o[f'{clock}_overhead_percent']:+.2f}% (median of {o['repeats']} runs: "
                f"{o[f'{clock}_overhead_percent_runs']})"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    if args.results:
        keyed = {**results, "checks": {str(r["rows"]): r for r in results["checks"]}}
        print(f"wrote {write_results('validator', keyed, command_line())}")


if __name__ == "__main__":
    main()

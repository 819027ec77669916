"""What the callbacks cost per training step: nothing, an empty callback, ``OrderValidator``,
``SymptomMonitor`` and both, side by side in one process.

A small MLP on token ids and float features (a batch shaped like ``OrderedDataModule``'s:
``input_ids``, ``attention_mask``, ``features``, ``labels``; about a 1.8 ms step on one CPU thread at
the default batch size) is fitted for ``--steps`` steps. The five variants take turns: every
round of five steps runs each once, in a shuffled order, by putting its callbacks in the
Trainer's callback list for that step only, so all five share one process, one data stream,
one allocator and the same machine load. ``OrderValidator`` and ``SymptomMonitor`` are in the
list from the start (their fit-start checks ran before step 1) and are taken out of it on the
steps of the other variants. Each step (every hook Lightning calls during it, its dispatch
included) is timed on this thread's CPU clock (torch runs single-threaded here: other
processes on a shared machine cannot inflate it) and on the wall clock.

A variant's cost is its mean step time against the steps with no callback of the same run,
after a warm-up: the mean, not the median, because the monitor's work is concentrated in one
step out of ``check_every_n_steps`` (steps over 3x the median, preemption, are dropped). Each
figure is the median over ``--repeats`` runs (pairs of a variant and the no-callback steps of
one run), with a 95 % bootstrap interval of that median.

Example:
    python benchmarks/bench_callbacks_step.py --steps 4000 --repeats 7 --json /tmp/bench_callbacks_step.json
    python benchmarks/bench_callbacks_step.py --steps 2000 --repeats 7 --warmup 300 --results   # results/callbacks_step.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from figures import command_line, write_results
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.trainer import call  # the dispatcher every callback hook goes through
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lightning_order import OrderValidator, SymptomMonitor

warnings.filterwarnings("ignore")
VARIANTS = ("none", "empty", "validator", "monitor", "both")


class EmptyCallback(Callback):
    """A callback that overrides nothing: what any callback costs Lightning's dispatch."""


class StepClock(Callback):
    """First in the callback list: starts the step's clocks before any variant's start hook."""

    def __init__(self) -> None:
        self.start = (0.0, 0.0)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.start = (time.perf_counter(), time.thread_time())


class Rotation(Callback):
    """Last in the list: reads the clocks after every variant's end hook, then sets the next variant.

    Args:
        members: the callbacks of each variant.
        warmup: global steps left out at the start.
        clock: the first callback of the list, which started the step's clocks.
    """

    def __init__(self, members: dict[str, list[Callback]], warmup: int, clock: StepClock) -> None:
        self.members, self.warmup, self.clock = members, warmup, clock
        self.wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
        self.cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        self.current = "none"
        self._random = random.Random(0)
        self._round: list[str] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        start = self.clock.start
        wall, cpu = time.perf_counter() - start[0], time.thread_time() - start[1]
        if trainer.global_step > self.warmup:
            self.wall[self.current].append(wall)
            self.cpu[self.current].append(cpu)
        self.use(trainer, self.next_variant())

    def next_variant(self) -> str:
        # Every variant once per round, in a shuffled order: a fixed order gives each variant its
        # own step phase, and a periodic cost of the step itself then lands on one variant.
        if not self._round:
            self._round = self._random.sample(VARIANTS, len(VARIANTS))
        return self._round.pop()

    def use(self, trainer: pl.Trainer, variant: str) -> None:
        """Puts ``variant``'s callbacks (and no other variant's) between the clock and this callback."""
        for member in self.members[self.current]:
            trainer.callbacks.remove(member)
        self.current = variant
        for offset, member in enumerate(self.members[variant]):
            trainer.callbacks.insert(1 + offset, member)


class Batches(Dataset):
    """Token ids (half padding), float features and learnable labels (no symptom is diagnosed)."""

    def __init__(self, rows: int, vocab: int = 400, length: int = 64, features: int = 7) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(2, vocab, (rows, length), generator=g)
        self.ids[:, length // 2 :] = 0
        self.features = torch.randn(rows, features, generator=g)
        self.labels = self.features[:, :4].argmax(1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.ids[i]
        return {
            "input_ids": ids,
            "attention_mask": (ids != 0).long(),
            "features": self.features[i],
            "labels": self.labels[i],
        }


class Model(pl.LightningModule):
    """An embedding bag and a three-layer MLP."""

    def __init__(self, vocab: int = 400, width: int = 256) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab, 64, padding_idx=0)
        self.net = nn.Sequential(
            nn.Linear(64 + 7, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4)
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = torch.cat([self.embedding(batch["input_ids"]), batch["features"]], -1)
        return nn.functional.cross_entropy(self.net(x), batch["labels"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run(steps: int, batch_size: int, warmup: int) -> dict[str, dict[str, float]]:
    """One fit with the variants taking turns; each variant's robust mean step time (s) per clock."""
    validator = OrderValidator()
    monitor = SymptomMonitor(unk_token_id=1, verbose=False)
    members: dict[str, list[Callback]] = {
        "none": [],
        "empty": [EmptyCallback()],
        "validator": [validator],
        "monitor": [monitor],
        "both": [validator, monitor],
    }
    clock = StepClock()
    rotation = Rotation(members, warmup, clock)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[clock, validator, monitor, rotation],  # both run their fit-start work
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    rotation.current = "both"  # what the list holds at the start: the first step sets a variant
    trainer.fit(Model(), DataLoader(Batches(batch_size * 64), batch_size=batch_size, shuffle=True))
    return {
        name: {v: robust_mean(times[v]) for v in VARIANTS}
        for name, times in (("wall", rotation.wall), ("cpu", rotation.cpu))
    }


def robust_mean(values: list[float], spike: float = 3.0) -> float:
    """The mean of the steps that took at most ``spike`` times the median (preemption dropped,
    the monitor's check steps kept)."""
    limit = spike * statistics.median(values)
    return statistics.fmean(v for v in values if v <= limit)


def median_interval(values: list[float], resamples: int = 4000) -> list[float]:
    """A seeded 95 % percentile-bootstrap interval of the median, rounded outwards to 0.01."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    low, high = medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]
    return [math.floor(low * 100) / 100, math.ceil(high * 100) / 100]


#: The hooks Lightning dispatches to the callbacks at every training step (automatic optimisation).
STEP_HOOKS: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("on_train_batch_start", (None, 0)),
    ("on_before_zero_grad", (None,)),
    ("on_before_backward", (None,)),
    ("on_after_backward", ()),
    ("on_before_optimizer_step", (None,)),
    ("on_train_batch_end", (None, None, 0)),
)


def dispatch_us(calls: int = 20000, repeats: int = 7) -> dict[str, float]:
    """Lightning's dispatch of one training step's six hooks to each variant's callbacks, in µs
    (CPU time, best of ``repeats``; the hooks' bodies included, the monitor's check every 50
    steps not: the fit figures hold it). Outside a training loop, so warm: a lower bound."""
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    monitor = SymptomMonitor(verbose=False, check_every_n_steps=1 << 30)
    validator = OrderValidator()
    members = {"none": [], "empty": [EmptyCallback()], "validator": [validator], "monitor": [monitor]}
    members["both"] = [validator, monitor]
    out = {}
    for variant in VARIANTS:
        trainer.callbacks[:] = members[variant]
        best = math.inf
        for _ in range(repeats):
            start = time.thread_time()
            for _ in range(calls):
                for hook, args in STEP_HOOKS:
                    call._call_callback_hooks(trainer, hook, *args)
            monitor._marks.clear()
            best = min(best, (time.thread_time() - start) / calls * 1e6)
        out[variant] = best
    return {v: round(out[v] - out["none"], 2) for v in VARIANTS[1:]}


def bench(
    steps: int, repeats: int, batch_size: int, warmup: int, dispatch_calls: int = 20000
) -> dict[str, Any]:
    """Each variant's per-step cost against no callback, measured in the same runs (median of ``repeats``)."""
    torch.manual_seed(0)
    run(60, batch_size, 10)  # a warm-up run: imports, thread pools
    runs = [run(steps, batch_size, warmup) for _ in range(repeats)]
    out: dict[str, Any] = {
        "steps_per_run": steps,
        "repeats": repeats,
        "batch_size": batch_size,
        "warmup": warmup,
    }
    for clock in ("cpu", "wall"):
        out[f"{clock}_step_ms"] = 1e3 * statistics.median(r[clock]["none"] for r in runs)
        for variant in VARIANTS[1:]:
            ratios = [100 * (r[clock][variant] / r[clock]["none"] - 1) for r in runs]
            out[f"{clock}_percent_{variant}"] = statistics.median(ratios)
            out[f"{clock}_percent_{variant}_interval"] = median_interval(ratios)
            out[f"{clock}_percent_{variant}_runs"] = [round(x, 2) for x in ratios]
    out["dispatch_us"] = dispatch_us(dispatch_calls)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--batch-size", type=int, default=128, help="128: about a 1.8 ms step on one CPU thread"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=300,
        help="global steps left out (the monitor's first 50 count unknown tokens)",
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/callbacks_step.json, the figures the docs quote"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = bench(args.steps, args.repeats, args.batch_size, args.warmup)
    print(f"step (no callback): {result['cpu_step_ms']:.2f} ms CPU, {result['wall_step_ms']:.2f} ms wall")
    for variant in VARIANTS[1:]:
        low, high = result[f"cpu_percent_{variant}_interval"]
        print(
            f"{variant:>9}: CPU {result[f'cpu_percent_{variant}']:+.2f} % (95 % interval {low:+.2f} to "
            f"{high:+.2f}; runs {result[f'cpu_percent_{variant}_runs']}), wall {result[f'wall_percent_{variant}']:+.2f} %"
        )
    print(f"dispatch of a step's six hooks, over no callback (µs): {result['dispatch_us']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    if args.results:
        print(f"wrote {write_results('callbacks_step', result, command_line())}")


if __name__ == "__main__":
    main()

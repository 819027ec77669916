"""What SymptomMonitor costs per training step, side by side with an empty callback, in one run.

A small MLP on token ids and float features (a batch shaped like ``OrderedDataModule``'s:
``input_ids``, ``attention_mask``, ``features``, ``labels``) is fitted for ``--steps`` steps. A
rotating callback puts nothing, an empty callback, and a ``SymptomMonitor`` (counting unknown
tokens, all symptoms on) in the callback list, each once per round of three steps in a shuffled
order, so the three share one process, one data stream and the same machine load; the labels are learnable, so
the run is healthy and every detector keeps running. Each step (both per-step hooks of the
variant and Lightning's dispatch of them included) is timed on the wall
clock and on this thread's CPU clock (torch runs single-threaded here: other processes on a
shared machine cannot inflate it). The overhead of a variant is its mean step time relative to
the steps with nothing, over the steps after a warm-up; the mean, not the median, because the
monitor's work is concentrated in one step out of ``check_every_n_steps`` (the check) and a
median would hide it (steps over 3x the median, preemption, are dropped). Each figure is the
median over ``--repeats`` runs, with a 95 % bootstrap interval of that median (the step time
drifts by tens of microseconds over a run, so one run's figure moves by about ±0.3 %).

It also states the monitor's collective calls: one all-gather per check (``k`` losses and the
symptom flags per rank) and, under DDP, one per validation (the ranks' validation input
statistics); on one process they return at once.

Example:
    python benchmarks/bench_monitor.py --steps 3000 --repeats 15 --batch-size 128 --warmup 150 --json bench_monitor.json
    python benchmarks/bench_monitor.py --steps 3000 --repeats 15 --batch-size 128 --warmup 150 --results   # results/monitor.json

With ``--control`` the results go to ``benchmarks/results/monitor_control.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from bench_callbacks_step import Batches, Model, median_interval, robust_mean
from figures import command_line, write_results
from pytorch_lightning.callbacks import Callback
from torch.utils.data import DataLoader

from lightning_order import SymptomMonitor

warnings.filterwarnings("ignore")
VARIANTS = ("none", "empty", "monitor")


class _Empty(Callback):
    """A callback with the same hooks as the monitor's per-step ones, doing nothing."""

    def on_train_batch_start(self, *args: Any) -> None:
        pass

    def on_train_batch_end(self, *args: Any) -> None:
        pass


class _Clock(Callback):
    """First in the callback list: starts the step's clocks before any variant's start hook."""

    def __init__(self) -> None:
        self.start = (0.0, 0.0)

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.start = (time.perf_counter(), time.thread_time())


class _Rotate(Callback):
    """Last in the list: reads the clocks after every variant's end hook, then rotates the variant.

    The variant sits between :class:`_Clock` and this callback, so both of its per-step hooks
    (and Lightning's dispatch of them) are inside the timed span. ``block``: the steps a variant
    is kept before the next one (1: a new variant every step; more: closer to a real run, where
    the monitor's code and data stay warm from one step to the next).
    """

    def __init__(
        self, members: dict[str, Callback | None], warmup: int, clock: _Clock, block: int = 1
    ) -> None:
        self.members, self.warmup, self.clock, self.block = members, warmup, clock, block
        self._held = 0
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
        self._held += 1
        if self._held < self.block:
            return
        self._held = 0
        member = self.members[self.current]
        if member is not None:
            trainer.callbacks.remove(member)
        if not self._round:
            # Every variant once per round of three steps, in a shuffled order: a fixed order
            # gives each variant its own step phase, and a periodic cost of the step itself (the
            # allocator, the loader) then lands on one variant (an empty callback put in the
            # monitor's slot of a fixed order measured +3 to +19 us where the same callback in
            # its own slot measured +8 us).
            self._round = self._random.sample(VARIANTS, len(VARIANTS))
        self.current = self._round.pop()
        member = self.members[self.current]
        if member is not None:
            trainer.callbacks.insert(1, member)  # after the clock's start, before this end


def _run(
    steps: int, batch_size: int, warmup: int, control: bool = False, block: int = 1
) -> dict[str, dict[str, float]]:
    monitor = _Empty() if control else SymptomMonitor(unk_token_id=1, verbose=False)
    clock = _Clock()
    rotate = _Rotate({"none": None, "empty": _Empty(), "monitor": monitor}, warmup, clock, block)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[clock, rotate],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(Batches(batch_size * 64), batch_size=batch_size, shuffle=True))
    return {
        clock: {v: robust_mean(times[v]) for v in VARIANTS}
        for clock, times in (("wall", rotate.wall), ("cpu", rotate.cpu))
    }


def bench(
    steps: int, repeats: int, batch_size: int, warmup: int = 30, control: bool = False, block: int = 1
) -> dict[str, Any]:
    """The per-step overhead of an empty callback and of the monitor, relative to no callback.

    ``control``: a second empty callback takes the monitor's place, a check of the method (both
    empty callbacks should then measure the same). ``block``: consecutive steps per variant.
    """
    torch.manual_seed(0)
    _run(60, batch_size, 10)  # warm-up run: imports, thread pools
    runs = [_run(steps, batch_size, warmup, control, block) for _ in range(repeats)]
    out: dict[str, Any] = {
        "steps_per_run": steps,
        "repeats": repeats,
        "batch_size": batch_size,
        "warmup_steps": warmup,
        "control": control,
        "block": block,
    }
    for clock in ("cpu", "wall"):
        out[f"{clock}_step_ms"] = 1e3 * statistics.median(r[clock]["none"] for r in runs)
        for variant in ("empty", "monitor"):
            ratios = [100 * (r[clock][variant] / r[clock]["none"] - 1) for r in runs]
            out[f"{clock}_overhead_percent_{variant}"] = statistics.median(ratios)
            out[f"{clock}_overhead_percent_{variant}_interval"] = median_interval(ratios)
            out[f"{clock}_overhead_percent_{variant}_runs"] = [round(x, 2) for x in ratios]
    out["all_gathers"] = (
        "one per check (every check_every_n_steps=50 batches: 50 losses + 6 flags per rank), "
        "plus under DDP one per validation (64 means + 64 stds per rank): "
        "steps_per_epoch / 50 + validations_per_epoch"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=64, help="64 gives about a 2 ms step on one CPU thread"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=30,
        help="global steps left out at the start (150: the monitor's first 50 batches, which count "
        "unknown tokens, are out: the steady state)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="a second empty callback in the monitor's place: checks that the method finds no cost where there is none",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=1,
        help="consecutive steps per variant (1: a new one every step; 10: the monitor's code stays warm as in a real run)",
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/monitor.json, the figures the docs quote"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = bench(args.steps, args.repeats, args.batch_size, args.warmup, args.control, args.block)
    print(f"step (nothing): {result['cpu_step_ms']:.2f} ms CPU, {result['wall_step_ms']:.2f} ms wall")
    for variant in ("empty", "monitor"):
        low, high = result[f"cpu_overhead_percent_{variant}_interval"]
        name = "empty #2" if result["control"] and variant == "monitor" else variant
        print(
            f"{name:>8}: CPU {result[f'cpu_overhead_percent_{variant}']:+.2f} % "
            f"(95 % interval {low:+.2f} to {high:+.2f}; runs {result[f'cpu_overhead_percent_{variant}_runs']}), wall "
            f"{result[f'wall_overhead_percent_{variant}']:+.2f} % (runs {result[f'wall_overhead_percent_{variant}_runs']})"
        )
    print(f"all-gathers: {result['all_gathers']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    if args.results:
        print(f"wrote {write_results('monitor_control' if args.control else 'monitor', result, command_line())}")


if __name__ == "__main__":
    main()

"""What ``OrderGuard`` / ``OrderCallback`` cost per step after step 1, in each loop: plain PyTorch, Fabric, HF Trainer.

After step 1 ``guard.step()`` is a flag check that returns a shared no-op context, and
``OrderCallback``'s per-step hooks are a flag check each. This measures what that costs against
the same loop without them:

- ``no-op``: one ``with guard.step(): pass`` after step 1, in microseconds (the whole overhead);
- ``plain`` and ``fabric``: ``examples/plain_loop.py``'s tiny GPT (one block, width 32, 8 x 32
  tokens; a few ms a step), the same model, optimizer and batches, guarded and bare steps taking
  turns in one process (every pair of steps runs both in a shuffled order), each step timed on
  this thread's CPU clock (other processes on a shared machine cannot inflate it);
- ``hf-trainer``: a tiny ``LlamaForCausalLM`` in the ``transformers`` ``Trainer``, ``--steps``
  steps with and without ``OrderCallback`` (checks and step 1 left out of the timing: the clock
  starts at the third step), the runs alternating, ``--repeats`` times.

A loop's figure is the ratio of the median guarded step to the median bare step (1.00: no cost),
with the medians' difference in microseconds.

Example:
    python benchmarks/bench_guard_step.py --steps 300 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import plain_loop
from figures import command_line, write_results

from lightning_order import OrderGuard


def _step(
    run: plain_loop.Run, model: Any, x: torch.Tensor, y: torch.Tensor, guard: Any, backward: Any
) -> float:
    start = time.thread_time()
    with guard.step() if guard is not None else _bare():
        _, loss = model(x, y)
        backward(loss)
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return time.thread_time() - start


class _Bare:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_BARE = _Bare()


def _bare() -> _Bare:
    return _BARE


def loop_cost(loop: str, steps: int, seed: int = 0) -> dict[str, float]:
    """Median guarded and bare step times (µs) of ``loop`` (``plain`` or ``fabric``), steps taking turns."""
    run = plain_loop.build(None, seed=seed)
    model, backward, loader = run.model, (lambda loss: loss.backward()), run.train_loader
    if loop == "fabric":
        from lightning.fabric import Fabric  # only this variant needs Fabric

        fabric = Fabric(accelerator="cpu", devices=1)
        model, run.optimizer = fabric.setup(run.model, run.optimizer)
        loader, backward = fabric.setup_dataloaders(run.train_loader), fabric.backward
    guard = OrderGuard(model, loader, run.val_loader, tokenizer=run.tokenizer)
    batches = list(loader)
    x, y = batches[0]
    _step(run, model, x, y, guard, backward)  # step 1: checked and judged, not timed
    times: dict[str, list[float]] = {"guarded": [], "bare": []}
    rng = random.Random(seed)
    for i in range(steps):
        x, y = batches[i % len(batches)]
        order = ["guarded", "bare"]
        rng.shuffle(order)
        for variant in order:
            times[variant].append(_step(run, model, x, y, guard if variant == "guarded" else None, backward))
    warm = steps // 10
    return {k: statistics.median(v[warm:]) * 1e6 for k, v in times.items()}


def hf_cost(steps: int, repeats: int) -> dict[str, float]:
    """Median step time (µs) of a tiny ``LlamaForCausalLM`` in the HF ``Trainer``, with and without ``OrderCallback``."""
    import transformers  # only this variant needs it

    from lightning_order.integrations.transformers import OrderCallback

    run = plain_loop.build(None)
    windows = run.train_loader.dataset
    rows = [
        {"input_ids": windows[i][0].tolist(), "labels": windows[i][0].tolist()} for i in range(len(windows))
    ]

    class Timer(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.start = time.thread_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step > 2:  # the checks and step 1 are not what this measures
                self.times.append(time.thread_time() - self.start)

    per: dict[str, list[float]] = {"guarded": [], "bare": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for variant in ("guarded", "bare"):
                torch.manual_seed(0)
                config = transformers.LlamaConfig(
                    vocab_size=run.tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                    max_position_embeddings=64,
                )  # fmt: skip
                args = transformers.TrainingArguments(
                    output_dir=tmp, max_steps=steps, per_device_train_batch_size=8, save_strategy="no",
                    report_to=[], use_cpu=True, disable_tqdm=True, logging_strategy="no",
                )  # fmt: skip
                timer = Timer()
                callbacks = [timer, *([OrderCallback()] if variant == "guarded" else [])]
                trainer = transformers.Trainer(
                    model=transformers.LlamaForCausalLM(config), args=args, train_dataset=rows,
                    data_collator=transformers.default_data_collator, callbacks=callbacks,
                )  # fmt: skip
                trainer.train()
                per[variant].append(statistics.median(timer.times) * 1e6)
    return {k: statistics.median(v) for k, v in per.items()}


def noop_cost(calls: int = 200_000) -> float:
    """µs per ``with guard.step(): pass`` after step 1."""
    run = plain_loop.build(None)
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    plain_loop.train(run, 1, guard)
    start = time.perf_counter()
    for _ in range(calls):
        with guard.step():
            pass
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measures every loop and prints one line each (``--json``: also written there)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loops", default="plain,fabric,hf-trainer")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/guard_step.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    result: dict[str, Any] = {"noop_us": noop_cost(), "steps": args.steps, "repeats": args.repeats}
    print(f"guard.step() after step 1: {result['noop_us']:.3f} µs")
    for loop in args.loops.split(","):
        if loop == "hf-trainer":
            medians = hf_cost(args.steps, args.repeats)
        else:
            runs = [loop_cost(loop, args.steps, seed) for seed in range(args.repeats)]
            medians = {k: statistics.median(r[k] for r in runs) for k in ("guarded", "bare")}
        ratio = medians["guarded"] / medians["bare"]
        result[loop] = {**medians, "ratio": ratio}
        print(
            f"{loop:10s} guarded {medians['guarded']:9.1f} µs  bare {medians['bare']:9.1f} µs  "
            f"ratio {ratio:.3f} ({medians['guarded'] - medians['bare']:+.1f} µs)"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    if args.results:
        print(
            write_results(
                "guard_step", result, command_line(None if argv is None else ["bench_guard_step.py", *argv])
            )
        )
    return result


if __name__ == "__main__":
    main()

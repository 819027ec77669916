"""DDP (2 CPU ranks, gloo), one launch: issue #43's corpus of correct LM pipelines (tests/corpus_shapes.py).

Run by tests/distributed/test_correct_corpus_ddp.py with argv = [output folder, shape, ...]. Each
rank builds every named shape in a folder of its own (the preparations are deterministic), then the
shapes train one after another in the same process group, two steps each, with
``OrderValidator(on_violation="warn")`` so that no shape ends the launch. After each shape, each rank
rewrites ``rank<r>.json``: per shape, the rule codes the validator holds, the ``OrderWarning`` count,
the steps trained, whether every loss was finite and whether the weights moved, or the validator's
failure (its exception's type and last line).
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for the shapes

import torch
from corpus_shapes import SHAPES, Losses, fit
from helpers import quiet_trainer

from lightning_order import OrderValidator, OrderWarning
from lightning_order.distributed import release_process_group


def run_shape(name: str, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True)
    data, module = SHAPES[name](folder)
    before = [p.detach().clone() for p in module.parameters()]
    validator, losses = OrderValidator(on_violation="warn"), Losses()
    trainer = quiet_trainer(
        folder, [validator, losses], devices=2, strategy="ddp", max_steps=2, limit_val_batches=1
    )
    result: dict[str, Any] = {"rank": trainer.global_rank}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit(trainer, module, data)
    except Exception as err:  # the validator's own failure (a crash), recorded for the report
        last = str(err).splitlines()[-1] if str(err) else ""
        return {**result, "failure": f"{type(err).__name__}: {last}"}
    moved = any(not torch.equal(a, b.detach().cpu()) for a, b in zip(before, module.parameters()))
    return {
        **result,
        "rules": [v.rule for v in validator.violations],
        "warnings": sum(issubclass(w.category, OrderWarning) for w in caught),
        "warned": [v.rule for v in validator.sampled_warnings],
        "steps": trainer.global_step,
        "finite": len(losses.values) == 2 and all(math.isfinite(v) for v in losses.values),
        "moved": moved,
    }


def main(out: Path, names: list[str]) -> None:
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    results: dict[str, Any] = {}
    for name in names:
        results[name] = run_shape(name, out / f"data-{rank}" / name)
        (out / f"rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

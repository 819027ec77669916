"""DDP (2 CPU ranks, gloo), one launch: both DataModules stopped by a periodic checkpoint and resumed.

Run by tests/distributed/test_resume_ddp.py with argv = [output folder, cache folder]. For each DataModule
(``standard``, ``lm``): an uninterrupted run of 2 epochs on 2 ranks × half the batch of
tests/resumes.py (so the global batch is the one-rank batch), ``num_workers=2``, checkpointed
after every step (``ModelCheckpoint(every_n_train_steps=1)``), then resumed with
``Trainer.fit(ckpt_path=...)`` from a step in the middle of the first epoch, its last step and
the first step of the second. Every rank writes ``rank<r>.json``: per DataModule, the row hashes
of every batch of the uninterrupted run and of each resumed run, and the validator's rules.
The checkpoints stay in ``<out>/<kind>/ckpt`` for the 2 ranks -> 1 rank resume the test runs.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from pytorch_lightning.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helpers
from helpers import quiet_trainer
from resumes import BATCH, BatchHashes, datamodule, model

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group

# No validation: its loader workers would double the processes; the single-process test validates.
DDP = {"devices": 2, "strategy": "ddp", "max_epochs": 2, "limit_val_batches": 0, "enable_checkpointing": True}


def run(
    kind: str, out: Path, cache: str, ckpt_path: str | None = None
) -> tuple[BatchHashes, OrderValidator, int]:
    dm = datamodule(kind, cache, batch_size=BATCH[kind] // 2)
    hashes, validator = BatchHashes(), OrderValidator(on_violation="warn")  # warn: no rank left hanging
    callbacks = [validator, hashes]
    if ckpt_path is None:
        every = ModelCheckpoint(
            dirpath=out / kind / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}"
        )
        callbacks.append(every)
    trainer = quiet_trainer(out, callbacks, **DDP)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model(kind, dm), dm, ckpt_path=ckpt_path)
    return hashes, validator, trainer.global_rank


def main(out: Path, cache: str) -> None:
    results: dict = {}
    rank = 0
    for kind in ("standard", "lm"):
        reference, validator, rank = run(kind, out, cache)
        steps = len(reference.batches) // 2
        resumed = {}
        for step in (5, steps, steps + 1):
            hashes, again, _ = run(kind, out, cache, str(out / kind / "ckpt" / f"step={step}.ckpt"))
            resumed[str(step)] = {"hashes": hashes.hashes(), "rules": [v.rule for v in again.violations]}
        results[kind] = {
            "steps": steps,
            "reference": reference.hashes(),
            "rules": [v.rule for v in validator.violations],
            "resumed": resumed,
        }
    (out / f"rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

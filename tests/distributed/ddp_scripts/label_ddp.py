"""DDP (2 CPU ranks, gloo): the label-encoding check on a hand-written datamodule with per-rank shards.

Usage: ``python label_ddp.py OUT_DIR``. The standard library's functions (tests/label_data.py)
with their module's target encoding, fitted on train + validation rows (``leak``) or on train
rows (``sound``). Each rank keeps its own shard of the train rows (``rows[rank::2]``: the check
must join them) and the whole validation split (the same on both ranks: kept once). Three cases
in one launch (the first Trainer starts the process group, the next ones reuse it):
``leak``/``validator`` (OrderValidator in warn mode and SymptomMonitor), ``leak``/``monitor``
(the monitor alone, which then reads the splits itself) and ``sound``/``validator``. Every rank
writes ``rank<r>.json``: one entry per case, keyed ``"<mode>-<callbacks>"``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for label_data.py

import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from label_data import FunctionsClassifier, FunctionsData

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order.distributed import release_process_group

CASES = (("leak", "validator"), ("leak", "monitor"), ("sound", "validator"))


def run_case(mode: str, callbacks: str) -> tuple[int, dict]:
    pl.seed_everything(0, workers=True)
    monitor = SymptomMonitor(verbose=False)
    validator = OrderValidator(on_violation="warn")
    chosen = [validator, monitor] if callbacks == "validator" else [monitor]
    trainer = quiet_trainer(None, chosen, devices=2, strategy="ddp", max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(FunctionsClassifier(), FunctionsData(leak=mode == "leak", shard=True))
    return trainer.global_rank, {
        "world_size": trainer.world_size,
        "violations": [v.to_dict() for v in validator.violations] if callbacks == "validator" else [],
        "diagnoses": [d.to_dict() for d in monitor.diagnoses],
        "steps_per_epoch": trainer.num_training_batches,
    }


def main(out: Path) -> None:
    torch.set_num_threads(1)
    results, rank = {}, 0
    for mode, callbacks in CASES:
        rank, results[f"{mode}-{callbacks}"] = run_case(mode, callbacks)
    (out / f"rank{rank}.json").write_text(json.dumps(results, default=str))
    release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

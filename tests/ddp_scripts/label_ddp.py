"""DDP (2 CPU ranks, gloo): the label-encoding check on a hand-written datamodule with per-rank shards.

Usage: ``python label_ddp.py OUT_DIR {leak,sound} {validator,monitor}``. The standard library's
functions (tests/label_data.py) with their module's target encoding, fitted on train +
validation rows (``leak``) or on train rows (``sound``). Each rank keeps its own shard of the
train rows (``rows[rank::2]``: the check must join them) and the whole validation split (the same
on both ranks: kept once). ``validator``: OrderValidator (warn) and SymptomMonitor; ``monitor``:
the monitor alone, which then reads the splits itself. Every rank writes ``rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for label_data.py

import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from label_data import FunctionsClassifier, FunctionsData

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order._distributed import release_process_group


def main(out: Path, mode: str, callbacks: str) -> None:
    pl.seed_everything(0, workers=True)
    torch.set_num_threads(1)
    monitor = SymptomMonitor(verbose=False)
    validator = OrderValidator(on_violation="warn")
    chosen = [validator, monitor] if callbacks == "validator" else [monitor]
    trainer = quiet_trainer(None, chosen, devices=2, strategy="ddp", max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(FunctionsClassifier(), FunctionsData(leak=mode == "leak", shard=True))
    result = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "violations": [v.to_dict() for v in validator.violations] if callbacks == "validator" else [],
        "diagnoses": [d.to_dict() for d in monitor.diagnoses],
        "steps_per_epoch": trainer.num_training_batches,
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result, default=str))
    release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])

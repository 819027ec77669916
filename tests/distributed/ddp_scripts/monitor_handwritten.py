"""DDP (2 CPU ranks, gloo): SymptomMonitor and OrderValidator on the correct hand-written pipeline.

Usage: ``python monitor_handwritten.py OUT_DIR``. tests/handwritten.py's DocsData (a word-level
vocabulary capped at 400 words: unknown tokens by design) and DocsClassifier, 3 epochs. Every
rank writes ``rank<r>.json`` with the monitor's diagnoses, its unknown-token rate and the
validator's rule codes. ``run`` is also called by monitor_ddp.py (several cases in one launch).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for handwritten.py

import pytorch_lightning as pl
import torch
from handwritten import DocsClassifier, DocsData
from helpers import quiet_trainer

from lightning_order import OrderValidator, SymptomMonitor
from lightning_order.distributed import release_process_group


def run(out: Path) -> dict:
    """Fits the pipeline on 2 ranks (files under ``out``); returns what this rank saw."""
    pl.seed_everything(0, workers=True)
    torch.set_num_threads(1)
    dm = DocsData()
    dm.setup("fit")  # the classic user code: set the data up, size the model from it
    monitor = SymptomMonitor(unk_token_id=dm.vocab["[UNK]"], check_every_n_steps=5)
    validator = OrderValidator(on_violation="warn")
    trainer = quiet_trainer(out, [validator, monitor], devices=2, strategy="ddp", max_epochs=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(DocsClassifier(vocab_size=dm.vocab_size), dm)
    return {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "global_step": trainer.global_step,
        "unk_rate": monitor.readings.unk_rate,
        "diagnoses": [d.to_dict() for d in monitor.diagnoses],
        "validator_rules": [v.rule for v in validator.violations],
    }


def main(out: Path) -> None:
    result = run(out)
    (out / f"rank{result['rank']}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

"""DDP (2 CPU ranks, gloo): a correct pipeline under OrderValidator raises nothing and warns nothing.

Run by tests/distributed/test_order_validator_ddp.py; argv[1] is the output folder. Each rank fits with a
checkpoint, then validates, and writes ``rank<r>.json`` with what it saw.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helpers
from helpers import quiet_trainer

from lightning_order import OrderedDataModule, OrderValidator, OrderWarning
from lightning_order.checks import check_ledger
from lightning_order.distributed import release_process_group
from lightning_order.models import OrderedTextClassifier


def main(out: Path) -> None:
    pl.seed_everything(0, workers=True)
    dm = OrderedDataModule(
        demo_size=600, vocab_size=300, max_length=16, batch_size=16, cache_dir=str(out / "cache")
    )
    model = OrderedTextClassifier(**dm.dims, embed_dim=8, hidden_dim=8)
    validator = OrderValidator()
    trainer = quiet_trainer(
        callbacks=[validator, ModelCheckpoint(dirpath=out / "ckpt", save_last=True)],
        devices=2,
        strategy="ddp",
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=2,
        enable_checkpointing=True,
        num_sanity_val_steps=2,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
        trainer.validate(model, dm, verbose=False)
    result = {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "order_warnings": [str(w.message)[:300] for w in caught if issubclass(w.category, OrderWarning)],
        "shard_info": dm.shard_info,
        "ledger_violations": [v.rule for v in check_ledger(dm.ledger)],
        "ledger_steps": dm.ledger.steps(),
        "fingerprints": validator.state_dict()["fingerprints"],
    }
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

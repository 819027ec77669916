"""DDP (2 CPU ranks, gloo): a weighted mixture trained, then resumed mid-epoch from a periodic checkpoint.

Run by tests/distributed/test_mixture_ddp.py with argv = [output folder, corpus folder, cache folder]:
an uninterrupted epoch on 2 ranks × 64 blocks (``tests/mixtures.py``'s sources at 0.7 / 0.3),
checkpointed after every step, then resumed from step 5. Every rank writes ``rank<r>.json``: the
row hashes of every batch of both runs, the validator's rules, and its ``shard`` record's served shares.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from pytorch_lightning.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared helpers
from helpers import quiet_trainer
from mixtures import mixture_dm
from resumes import BatchHashes, model

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group

DDP = {"devices": 2, "strategy": "ddp", "max_epochs": 1, "limit_val_batches": 0, "enable_checkpointing": True}


def run(out: Path, corpus: Path, cache: str, ckpt_path: str | None = None) -> dict:
    dm = mixture_dm(corpus, cache, batch_size=64)
    hashes, validator = BatchHashes(), OrderValidator(on_violation="warn")  # warn: no rank left hanging
    callbacks = [validator, hashes]
    if ckpt_path is None:
        callbacks.append(
            ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}")
        )
    trainer = quiet_trainer(out, callbacks, **DDP)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model("lm", dm), dm, ckpt_path=ckpt_path)
    return {
        "rank": trainer.global_rank,
        "hashes": hashes.hashes(),
        "rules": [v.rule for v in validator.violations],
        "shares": dm.ledger.latest("shard").stats["mixture_shares"],
    }


def main(out: Path, corpus: Path, cache: str) -> None:
    reference = run(out, corpus, cache)
    resumed = run(out, corpus, cache, str(out / "ckpt" / "step=5.ckpt"))
    (out / f"rank{reference['rank']}.json").write_text(
        json.dumps({"reference": reference, "resumed": resumed})
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

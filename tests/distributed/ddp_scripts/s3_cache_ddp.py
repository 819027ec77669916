"""Two CPU ranks (gloo, strategy="ddp") train one epoch from a local cache, then from the same data on an S3 API server,
then resume the second run mid-epoch from its checkpoint on the server.

Usage: python s3_cache_ddp.py OUT_DIR LOCAL_CACHE_ROOT S3_CACHE_URL S3_RUNS_URL
The AWS variables (endpoint, credentials) come from the environment the test launched with. One
launch, three fits in the same process group: ``local`` (``cache_dir=LOCAL_CACHE_ROOT``), ``s3``
(``cache_dir=S3_CACHE_URL``, prepared and published by rank 0's ``prepare_data`` during the fit,
checkpointed every :data:`EVERY` steps to ``S3_RUNS_URL/ckpt``) and ``resumed`` (a new DataModule
on the same ``cache_dir`` and a fresh local cache, as on new machines, ``Trainer.fit(ckpt_path=S3_RUNS_URL/ckpt/step=<EVERY>.ckpt)``: stopped
mid-epoch). Writes OUT_DIR/rank<r>.json: per case, the row hashes of every batch this rank trained
on, the validator's violations, for ``s3`` the bytes this rank fetched from the server and served,
for ``resumed`` the step the validator's resume proof recorded and what it fetched.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for resumes.py

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from resumes import BatchHashes, model

from lightning_order import OrderedLMDataModule, OrderValidator
from lightning_order.data.engine.cache import CACHE_ENV
from lightning_order.data.engine.shard_cache import fetched_bytes
from lightning_order.distributed import release_process_group

DATA = {"max_documents": 200, "vocab_size": 300, "block_size": 16, "batch_size": 4, "num_proc": 1}
#: The ``s3`` run is checkpointed every this many steps (of its 381); ``resumed`` starts from the
#: first, late in the epoch so that it runs few steps.
EVERY = 360


def run(cache: str, checkpoints: str | None = None, ckpt_path: str | None = None) -> dict:
    """One epoch on 2 ranks (checkpointed to ``checkpoints``, or resumed from ``ckpt_path``); what this rank saw."""
    dm = OrderedLMDataModule(cache_dir=cache, **DATA)
    hashes, validator = BatchHashes(), OrderValidator()
    callbacks: list[pl.Callback] = [validator, hashes]
    if checkpoints is not None:
        callbacks.append(
            ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=EVERY, save_top_k=-1, filename="{step}")
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,  # the fetch figure counts the train split only
    )
    before, started = fetched_bytes(), time.perf_counter()
    trainer.fit(model("lm", dm), dm, ckpt_path=ckpt_path)
    train = dm.ledger.latest("train")
    rows = sum(len(batch) for batch in hashes.hashes())
    return {
        "rank": trainer.global_rank,
        "batches": hashes.hashes(),
        "violations": [v.rule for v in validator.violations],
        "resumed_at": (train.stats or {}).get("resumed_at") if train is not None else None,
        "fetched": fetched_bytes() - before,
        "seconds": time.perf_counter() - started,
        "served": rows * (DATA["block_size"] + 1) * 4,
        "published": {  # the block shards' bytes per split, as the manifest lists them
            split: sum(
                r["size"]
                for n, r in dm.ledger.info["files"].items()
                if n.startswith(f"{split}/blocks/") and n.endswith(".npy")
            )
            for split in ("train", "val")
        },
    }


def main() -> None:
    out, local, url, runs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    results = {"local": run(local), "s3": run(url, checkpoints=f"{runs}/ckpt")}
    # Restarted as on new machines: a fresh local cache (mirror and shards) for the resumed run.
    os.environ[CACHE_ENV] = str(out / "restarted-user-cache")
    results["resumed"] = run(url, ckpt_path=f"{runs}/ckpt/step={EVERY}.ckpt")
    (out / f"rank{results['s3']['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

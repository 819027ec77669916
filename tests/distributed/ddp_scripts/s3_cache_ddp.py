"""Two CPU ranks (gloo, strategy="ddp") train one epoch from a local cache, then from the same data on an S3 API server.

Usage: python s3_cache_ddp.py OUT_DIR LOCAL_CACHE_ROOT S3_CACHE_URL
The AWS variables (endpoint, credentials) come from the environment the test launched with. One
launch, two fits in the same process group: ``local`` (``cache_dir=LOCAL_CACHE_ROOT``) and ``s3``
(``cache_dir=S3_CACHE_URL``, prepared and published by rank 0's ``prepare_data`` during the fit).
Writes OUT_DIR/rank<r>.json: per case, the row hashes of every batch this rank trained on, the
validator's violations, and for ``s3`` the bytes this rank fetched from the server and served.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for resumes.py

import pytorch_lightning as pl
from resumes import BatchHashes, model

from lightning_order import OrderedLMDataModule, OrderValidator
from lightning_order.data.engine.shard_cache import fetched_bytes
from lightning_order.distributed import release_process_group

DATA = {"max_documents": 200, "vocab_size": 300, "block_size": 16, "batch_size": 4, "num_proc": 1}


def run(cache: str) -> dict:
    """One epoch on 2 ranks; what this rank saw."""
    dm = OrderedLMDataModule(cache_dir=cache, **DATA)
    hashes, validator = BatchHashes(), OrderValidator()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        callbacks=[validator, hashes],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,  # the fetch figure counts the train split only
    )
    before = fetched_bytes()
    trainer.fit(model("lm", dm), dm)
    rows = sum(len(batch) for batch in hashes.hashes())
    return {
        "rank": trainer.global_rank,
        "batches": hashes.hashes(),
        "violations": [v.rule for v in validator.violations],
        "fetched": fetched_bytes() - before,
        "served": rows * (DATA["block_size"] + 1) * 4,
        "published": {  # the block shards' bytes per split, as the manifest lists them
            split: sum(r["size"] for n, r in dm.ledger.info["files"].items() if n.startswith(f"{split}/blocks/") and n.endswith(".npy"))
            for split in ("train", "val")
        },
    }


def main() -> None:
    out, local, url = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    results = {"local": run(local), "s3": run(url)}
    (out / f"rank{results['s3']['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

"""Two CPU ranks (gloo, strategy="ddp") train OrderedCausalLM on OrderedLMDataModule; each rank writes what it saw.

Usage: python lm_ddp.py OUT_DIR CACHE_DIR [default|tokenizer-per-rank]
Writes OUT_DIR/rank<r>.json: shard info, data fingerprints (the tokenizer's included), a hash of
every train block this rank holds, the batches it trained on, the validator's violations, or the
error it raised. ``tokenizer-per-rank`` adds a token on rank 1 only after the model is built (a
tokenizer that differs by rank): the validator must stop both ranks before step 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import xxhash

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator
from lightning_order.data.lm.artefacts import read_blocks
from lightning_order.distributed import release_process_group


class Counter(pl.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *args, **kwargs) -> None:
        self.batches += 1


class PerRankTokenizer(pl.Callback):
    """Rank 1 changes its tokenizer in setup (before the validator's checks run)."""

    def setup(self, trainer, pl_module, stage) -> None:
        if trainer.global_rank == 1:
            trainer.datamodule.tokenizer.add_special_tokens(["<pad>"])


def main() -> None:
    out, cache = Path(sys.argv[1]), sys.argv[2]
    variant = sys.argv[3] if len(sys.argv) > 3 else "default"
    dm = OrderedLMDataModule(max_documents=300, vocab_size=400, block_size=32, batch_size=8, cache_dir=cache)
    model = OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=32)
    validator, counter = OrderValidator(), Counter()
    callbacks = [PerRankTokenizer()] if variant == "tokenizer-per-rank" else []
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=4,
        callbacks=[*callbacks, validator, counter],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=2,
    )
    result: dict = {}
    try:
        trainer.fit(model, dm)
    except OrderError as err:
        result.update(error="OrderError", rules=err.rules, message=str(err))
    blocks = np.asarray(dm.blocks("train"))
    result.update(
        rank=trainer.global_rank,
        shard_info=dm.shard_info,
        fingerprints=dm.data_fingerprints(),
        block_hashes=[xxhash.xxh3_64_hexdigest(row.tobytes()) for row in blocks],
        split_block_hashes=[
            xxhash.xxh3_64_hexdigest(row.tobytes()) for row in read_blocks(dm.cache_path)["train"]
        ],
        batches=counter.batches,
        global_step=trainer.global_step,
        violations=[v.rule for v in validator.violations],
    )
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

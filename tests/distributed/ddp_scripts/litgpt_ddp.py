"""DDP (2 CPU ranks, gloo), one launch: litgpt's data modules with no glue (issue #48).

Run by tests/distributed/test_litgpt_ddp.py with argv = [output folder]. Each rank writes the same
data into its own folder (tests/litgpt_pipelines.py is deterministic): a BPE checkpoint folder,
instruction data, ``.txt`` and TinyStories shards optimized by litdata. The cases run one after
another in the same process group, the validator in warn mode (an exception in DDP makes rank 0
kill the other rank); each rank writes, per case, the rule codes ``OrderValidator.violations``
holds and the steps trained into ``rank<r>.json``:

- ``TextFiles``, ``TinyStories``: pretraining on litdata's ``StreamingDataset``, correct;
- ``JSON``: correct SFT (``mask_prompt=True``);
- ``JSON val=train``: ``val.json`` equal to ``train.json``;
- ``JSON answers cut``: ``mask_prompt=False`` with ``max_seq_length`` inside most prompts.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for litgpt_pipelines.py

import lightning.pytorch as L
from helpers import quiet_trainer
from litgpt.data import JSON, TextFiles, TinyStories
from litgpt.tokenizer import Tokenizer
from litgpt_pipelines import LitGPT, checkpoint_folder, instructions, pretraining_shards, write_json

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group

BLOCK, VOCAB = 64, 512


def prepare(root: Path) -> tuple[Tokenizer, dict[str, Path]]:
    tokenizer = Tokenizer(checkpoint_folder(root / "checkpoint", VOCAB))
    shards = pretraining_shards(root, tokenizer, BLOCK)
    sft, twins = root / "sft", root / "twins"
    write_json(sft / "data.json", instructions())
    write_json(twins / "train.json", instructions())
    write_json(twins / "val.json", instructions())
    return tokenizer, {"texts": shards["TextFiles"], "tiny": shards["TinyStories"], "sft": sft / "data.json", "twins": twins}


def run_case(dm: L.LightningDataModule, tokenizer: Tokenizer, pretrain: bool, max_seq_length: int = 1024) -> dict:
    dm.connect(tokenizer, batch_size=4, max_seq_length=BLOCK if pretrain else max_seq_length)
    validator = OrderValidator(on_violation="warn")
    trainer = quiet_trainer(None, [validator], ns=L, devices=2, strategy="ddp", max_steps=1, limit_val_batches=1)
    model = LitGPT(VOCAB, block_size=BLOCK if pretrain else 2048, pretrain=pretrain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, dm)
    return {"rules": [v.rule for v in validator.violations], "steps": trainer.global_step, "rank": trainer.global_rank}


def main(out: Path) -> None:
    tokenizer, paths = prepare(out / f"data-{os.environ.get('LOCAL_RANK', '0')}")
    results = {
        "TextFiles": run_case(TextFiles(paths["texts"], num_workers=0), tokenizer, True),
        "TinyStories": run_case(TinyStories(paths["tiny"], num_workers=0), tokenizer, True),
        "JSON": run_case(JSON(paths["sft"], mask_prompt=True, val_split_fraction=0.1, num_workers=0), tokenizer, False),
        "JSON val=train": run_case(JSON(paths["twins"], num_workers=0), tokenizer, False),
        # Alpaca's template and an instruction take 91 to 102 tokens of this BPE (test_litgpt.py).
        "JSON answers cut": run_case(
            JSON(paths["sft"], mask_prompt=False, val_split_fraction=0.1, num_workers=0), tokenizer, False, 95
        ),
    }
    (out / f"rank{results['JSON']['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

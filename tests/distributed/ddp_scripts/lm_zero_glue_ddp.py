"""DDP (2 CPU ranks, gloo), one launch: the nanoGPT-style LM pipeline of tests/nanogpt.py with no glue.

Run by tests/distributed/test_lm_zero_glue_ddp.py with argv = [output folder]. Rank 0's launch
prepares the data once (``prepare`` is deterministic, so the second rank, re-run by Lightning's
launcher, prepares the very same files in its own folder). The cases run one after another in
the same process group; the validator runs in warn mode so that no case ends the launch (an
exception in DDP makes rank 0 kill the other rank); each rank writes, per case, the rule codes
``OrderValidator.violations`` holds (identical on every rank by construction) and the steps
trained into ``rank<r>.json``:

- ``correct``: the correct pipeline;
- ``pad-added``: a pad token added to the tokenizer, the model sized from ``tokenizer.vocab_size``;
- ``per-rank-tokenizer``: each rank trains its own tokenizer in ``setup``;
- ``no-eos``: documents concatenated with no end-of-text token (block size 32);
- ``twins``: 19 % of the validation documents with an exact twin in train;
- ``per-rank-block-size``: ``block_size`` 32 on rank 0, 64 on rank 1.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for nanogpt.py

from helpers import quiet_trainer
from nanogpt import BLOCK, BinData, LatePadData, PerRankBlockData, PerRankTokenizerData, TinyGPT, prepare

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group

CASES = {
    "correct": (BinData, {}),
    "pad-added": (LatePadData, {}),
    "per-rank-tokenizer": (PerRankTokenizerData, {}),
    "no-eos": (BinData, {"eos": False}),
    "twins": (BinData, {"twins": 0.19}),
    "per-rank-block-size": (PerRankBlockData, {}),
}


def run_case(folder: Path, data_cls: type) -> dict:
    dm = data_cls(folder)
    dm.setup("fit")  # the classic user code: set the data up, size the model from the tokenizer
    # Added tokens left out: the pad-added bug; positions for rank 1's longer blocks (per-rank-block-size).
    model = TinyGPT(dm.tokenizer.vocab_size, block_size=2 * BLOCK)
    validator = OrderValidator(on_violation="warn")
    trainer = quiet_trainer(None, [validator], devices=2, strategy="ddp", max_steps=1, limit_val_batches=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, dm)
    fixes = "\n".join(v.fix for v in validator.violations)
    return {"rules": [v.rule for v in validator.violations], "fix": fixes, "rank": trainer.global_rank}


def main(out: Path) -> None:
    # Each process prepares into its own folder (Lightning's launcher re-runs this script for rank 1).
    where = out / f"data-{os.environ.get('LOCAL_RANK', '0')}"
    for name, (_, options) in CASES.items():
        prepare(where / name, **options)
    results = {name: run_case(where / name, data_cls) for name, (data_cls, _) in CASES.items()}
    rank = results["correct"]["rank"]
    (out / f"rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

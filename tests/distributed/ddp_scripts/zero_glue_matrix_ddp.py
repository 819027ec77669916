"""DDP (2 CPU ranks, gloo), one launch: issue #37's pipeline shapes A, B, C with no glue.

Run by tests/distributed/test_zero_glue_matrix_ddp.py with argv = [output folder]. Each rank builds
the same data (the preparations are deterministic; B's files in a folder of its own), then the
cases run one after another in the same process group, the validator in warn mode so that no case
ends the launch; each rank writes, per case, the rule codes ``OrderValidator.violations`` holds and
the steps trained into ``rank<r>.json``:

- ``A``, ``B``, ``C``: the three correct pipelines;
- ``eos-label-masked-A``: run_clm.py's pipeline with ``pad_token = eos_token``;
- ``bos-on-train-only-C``: the Llama-style pipeline, validation tokenized without ``<s>``;
- ``truncated-A``: run_clm.py's pipeline tokenizing with ``truncation=True, max_length=20``;
- ``padded-without-eos-C``: the Llama-style pipeline with a ``<s> $A`` post-processor;
- ``seed-rank-A``, ``all-data-A``, ``seed-rank-B``, ``all-data-B``: the rank rows (a
  ``DistributedSampler(seed=rank)``; every rank reading all data, ``use_distributed_sampler=False``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for the pipeline shapes

from helpers import quiet_trainer
from llama_style import LlamaData, LlamaModel
from nanogpt import BinData, TinyGPT, prepare
from run_clm import ClmData, ClmModel, seat
from torch.utils.data import DataLoader, DistributedSampler

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group


class SeedRankBinData(BinData):
    """nanoGPT's windows through ``DistributedSampler(seed=rank)``: each rank its own permutation."""

    def train_dataloader(self) -> DataLoader:
        rank, world = seat()
        sampler = DistributedSampler(self.train_set, num_replicas=world, rank=rank, seed=rank)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler)


def cases(folder: Path) -> dict[str, tuple[Any, type, dict[str, Any]]]:
    """name -> (datamodule factory, model class, Trainer keywords)."""
    all_data = {"use_distributed_sampler": False}
    return {
        "A": (lambda: ClmData(), ClmModel, {}),
        "B": (lambda: BinData(folder), TinyGPT, {}),
        "C": (lambda: LlamaData(), LlamaModel, {}),
        "eos-label-masked-A": (lambda: ClmData(pad_is_eos=True), ClmModel, {}),
        "bos-on-train-only-C": (lambda: LlamaData(bos_train_only=True), LlamaModel, {}),
        "truncated-A": (lambda: ClmData(max_length=20), ClmModel, {}),
        "padded-without-eos-C": (lambda: LlamaData(no_eos=True), LlamaModel, {}),
        "seed-rank-A": (lambda: ClmData(sampler="seed-rank"), ClmModel, {}),
        "all-data-A": (lambda: ClmData(), ClmModel, all_data),
        "seed-rank-B": (lambda: SeedRankBinData(folder), TinyGPT, {}),
        "all-data-B": (lambda: BinData(folder), TinyGPT, all_data),
    }


def run_case(make_dm: Any, model_cls: type, options: dict[str, Any]) -> dict:
    dm = make_dm()
    dm.setup("fit")
    validator = OrderValidator(on_violation="warn")
    trainer = quiet_trainer(
        None, [validator], devices=2, strategy="ddp", max_steps=1, limit_val_batches=1, **options
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model_cls(len(dm.tokenizer)), dm)
    return {
        "rules": [v.rule for v in validator.violations],
        "steps": trainer.global_step,
        "rank": trainer.global_rank,
    }


def main(out: Path) -> None:
    folder = out / f"data-{os.environ.get('LOCAL_RANK', '0')}"
    prepare(folder)
    results = {name: run_case(*case) for name, case in cases(folder).items()}
    (out / f"rank{results['A']['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

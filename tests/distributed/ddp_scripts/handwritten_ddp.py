"""DDP (2 CPU ranks, gloo), one launch: hand-written pipelines with no lightning_order glue.

Run by tests/distributed/test_handwritten_ddp.py with argv = [output folder]. The cases run one after another
in the same process group (Lightning launches the second rank at the first ``fit``; later
Trainers reuse it). The validator runs in warn mode so that no case ends the launch (an
exception in DDP makes rank 0 kill the other rank); each rank writes, per case, the rule codes
``OrderValidator.violations`` holds (identical on every rank by construction) into
``rank<r>.json``:

- ``correct-pytorch_lightning`` / ``correct-lightning.pytorch``: the correct pipeline, built on
  each namespace's classes and run by that namespace's Trainer;
- ``random-split``: ``random_split`` without a generator in ``setup`` (Lightning #7728);
- ``per-rank-stats``: each rank fits mean/std on its own shard in ``setup`` (batch key ``numeric``).
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for handwritten.py

from handwritten import PerRankStatsData, RandomSplitData, build, glue_lines
from helpers import quiet_trainer

from lightning_order import OrderValidator
from lightning_order.distributed import release_process_group


def run_case(namespace: str, data_cls: type, model_cls: type) -> dict:
    ns = importlib.import_module(namespace)
    dm = data_cls()
    dm.setup("fit")  # the classic user code: set the data up, size the model from it
    model = model_cls(vocab_size=dm.vocab_size)
    validator = OrderValidator(on_violation="warn")
    short = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1}
    trainer = quiet_trainer(None, [validator], ns=ns, devices=2, strategy="ddp", **short)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, dm)
    return {
        "rules": [v.rule for v in validator.violations],
        "messages": "\n".join(v.message for v in validator.violations),
        "global_step": trainer.global_step,
        "rank": trainer.global_rank,
    }


def main(out: Path) -> None:
    results: dict = {}
    for namespace in ("pytorch_lightning", "lightning.pytorch"):
        data_cls, model_cls = build(importlib.import_module(namespace))
        results[f"correct-{namespace}"] = run_case(namespace, data_cls, model_cls)
    _, model_cls = build(importlib.import_module("pytorch_lightning"))
    results["random-split"] = run_case("pytorch_lightning", RandomSplitData, model_cls)
    results["per-rank-stats"] = run_case("pytorch_lightning", PerRankStatsData, model_cls)
    results["glue"] = {
        "random-split": glue_lines(RandomSplitData),
        "per-rank-stats": glue_lines(PerRankStatsData),
    }
    rank = results["random-split"]["rank"]
    (out / f"rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

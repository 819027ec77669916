"""OrderedCausalLM validated on OrderedLMDataModule's shares of the validation split (issue #35): exact across ranks.

Usage: python val_ddp.py OUT_DIR CACHE_DIR [one]
With ``one`` (a single process, no DDP job): the 1-rank reference, ``validate`` and ``test`` of the
same seeded model on the same cache. Otherwise, on 2 CPU ranks (gloo), one launch, its cases one
after another in the same process group, all on one prepared cache:

- ``ddp``: ``validate`` and ``test`` of the seeded model (no training) under ``strategy="ddp"``;
- ``ddp-fit``: 2 steps and a full validation with the validator (the shares must not look like ranks
  holding different validation sets, and uneven batch counts must not stall a rank);
- ``fsdp2`` (dp 2 × tp 1) and ``tp`` (dp 1 × tp 2) under ``ModelParallelStrategy``: ``validate``.

Writes OUT_DIR/rank<r>.json (``one``: OUT_DIR/one.json), a key per case: the logged metrics, the
perplexity line the run summary prints from them, the
indices the validation loader's sampler yields on this rank, a hash of every validation row it
scored, and this rank's own sum and count of token losses computed here in float64 (the test
merges them into the flat mean, and into the mean of rank means the sum-and-count metric replaces).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for helpers.py

import pytorch_lightning as pl
import torch
import xxhash
from helpers import quiet_trainer
from pytorch_lightning.strategies import ModelParallelStrategy
from rich.console import Console
from torch.nn import functional as F

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator
from lightning_order.data.lm.figures import print_lm_summary
from lightning_order.distributed import release_process_group

#: 150 documents make 97 validation blocks: shares of 48 and 49 on 2 ranks (uneven on purpose).
DATA = {"max_documents": 150, "vocab_size": 300, "block_size": 32, "batch_size": 4}
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 32}
MESHES = {"fsdp2": (2, 1), "tp": (1, 2)}
METRICS = ("val_loss", "val_ppl", "test_loss", "test_ppl")


class ValRows(pl.Callback):
    """A hash of every validation row this rank scored (after sanity checks); rows with no target counted apart."""

    def __init__(self) -> None:
        self.hashes: list[str] = []
        self.padding = 0
        self.batches = 0

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.sanity_checking:
            return
        self.batches += 1
        scored = (batch["labels"] != -100).any(dim=1).tolist()
        for row, kept in zip(batch["input_ids"].cpu().numpy(), scored):
            if kept:
                self.hashes.append(xxhash.xxh3_64_hexdigest(row.tobytes()))
            else:
                self.padding += 1


def _model(dm: OrderedLMDataModule) -> OrderedCausalLM:
    torch.manual_seed(0)  # the same weights in every process: the 1-rank run's included
    return OrderedCausalLM(**dm.dims, **MODEL)


def _own_sum(model: OrderedCausalLM, loader) -> tuple[float, int]:
    """This rank's summed token loss (float64) and token count over its validation loader, computed here."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            logits, labels = model(batch).double(), batch["labels"]
            total += F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum").item()
            tokens += int((labels != -100).sum())
    return total, tokens


def _metrics(trainer: pl.Trainer, found: dict) -> dict:
    found.update({k: float(v) for k, v in trainer.callback_metrics.items() if k in METRICS})
    return found


def _summary(dm: OrderedLMDataModule, metrics: dict) -> str:
    """What the run summary prints after the metrics (``lightning-order validate``), as text."""
    console = Console(file=io.StringIO(), width=200)
    print_lm_summary(console, dm, None, "validate", metrics)
    return console.file.getvalue().strip()


def _evaluated(trainer: pl.Trainer, dm: OrderedLMDataModule, rows: ValRows) -> dict:
    """``validate`` then ``test`` of the seeded model: the logged metrics and what this rank read."""
    model = _model(dm)
    result = _metrics(trainer, trainer.validate(model, dm, verbose=False)[0])
    result["summary"] = _summary(dm, {k: float(v) for k, v in trainer.callback_metrics.items()})
    sampler = trainer.val_dataloaders.sampler
    result.update(
        rank=trainer.global_rank,
        sampler=[int(i) for i in sampler],
        sampler_type=type(sampler).__name__,
        row_hashes=rows.hashes,
        padding=rows.padding,
        batches=rows.batches,
        val_blocks=len(dm.blocks("val")),
    )
    result.update(_metrics(trainer, trainer.test(model, dm, verbose=False)[0]))
    if not isinstance(trainer.strategy, ModelParallelStrategy):  # a sharded model's forward is collective
        result["own_sum"], result["own_tokens"] = _own_sum(model.eval(), dm.val_dataloader())
    return result


def run_ddp(cache: str) -> dict:
    rows = ValRows()
    trainer = quiet_trainer(None, [rows], devices=2, strategy="ddp")
    return _evaluated(trainer, OrderedLMDataModule(**DATA, cache_dir=cache), rows)


def run_fit(cache: str) -> dict:
    dm = OrderedLMDataModule(**DATA, cache_dir=cache)
    validator, rows = OrderValidator(), ValRows()
    trainer = quiet_trainer(
        None,
        [validator, rows],
        devices=2,
        strategy="ddp",
        max_steps=2,
        val_check_interval=2,  # one whole validation, after step 2
        num_sanity_val_steps=2,
    )
    result: dict = {}
    try:
        trainer.fit(_model(dm), dm)
    except OrderError as err:
        result.update(error="OrderError", rules=err.rules, message=str(err))
    return _metrics(
        trainer,
        {
            **result,
            "rank": trainer.global_rank,
            "global_step": trainer.global_step,
            "row_hashes": rows.hashes,
            "padding": rows.padding,
            "batches": rows.batches,
            "violations": [v.rule for v in validator.violations or []],
        },
    )


def run_mesh(cache: str, mesh: str) -> dict:
    dp, tp = MESHES[mesh]
    strategy = ModelParallelStrategy(data_parallel_size=dp, tensor_parallel_size=tp)
    rows = ValRows()
    trainer = quiet_trainer(None, [rows], devices=2, strategy=strategy)
    return _evaluated(trainer, OrderedLMDataModule(**DATA, cache_dir=cache), rows)


def main() -> None:
    out, cache = Path(sys.argv[1]), sys.argv[2]
    if sys.argv[3:] == ["one"]:
        rows = ValRows()
        result = _evaluated(quiet_trainer(None, [rows]), OrderedLMDataModule(**DATA, cache_dir=cache), rows)
        (out / "one.json").write_text(json.dumps(result))
        return
    results: dict = {}
    for case, run in (
        ("ddp", lambda: run_ddp(cache)),
        ("ddp-fit", lambda: run_fit(cache)),
        ("fsdp2", lambda: run_mesh(cache, "fsdp2")),
        ("tp", lambda: run_mesh(cache, "tp")),
    ):
        results[case] = run()
        (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)

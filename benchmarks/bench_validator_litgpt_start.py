"""What ``OrderValidator()`` adds before step 1 on a litgpt pretraining run (#48).

litgpt's ``TextFiles`` over litdata chunks: the standard library's docstrings written as ``.txt``
shards, tokenized by litgpt's own ``tokenize`` with a byte-level BPE of 4 096 tokens read by
litgpt's ``Tokenizer`` from a checkpoint folder, optimized once (untimed) with litdata's
``optimize``; a ``litgpt.model.GPT`` of 2 layers, 128 wide, trained with ``chunked_cross_entropy``
on windows of 512 tokens, batches of 8. ``fit`` runs to its first train batch without and with the
validator, three alternating pairs, one torch thread. Printed: the seconds from ``fit`` to the
first batch of each pair and the median added.

Needs litgpt and litdata (``pip install --no-deps litgpt==0.5.13 litdata==0.2.76``).
Run: ``python benchmarks/bench_validator_litgpt_start.py [--results]`` (about 12 s; ``--results``
writes ``benchmarks/results/validator_litgpt_start.json``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import statistics
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import torch
from figures import command_line, write_results
from litdata import TokensLoader, optimize
from litgpt.config import Config
from litgpt.data import TextFiles, text_files
from litgpt.model import GPT
from litgpt.tokenizer import Tokenizer
from litgpt.utils import chunked_cross_entropy

from lightning_order import OrderValidator
from lightning_order.data.lm.tokenizer import train_byte_bpe

BLOCK, BATCH, VOCAB = 512, 8, 4096


class _FirstBatch(L.Callback):
    """Notes when the first train batch starts."""

    def __init__(self) -> None:
        self.at = float("nan")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0:
            self.at = time.perf_counter()


class _Pretrain(L.LightningModule):
    """litgpt's ``pretrain.py`` step on a tiny ``GPT``."""

    def __init__(self) -> None:
        super().__init__()
        config = Config(block_size=BLOCK, vocab_size=VOCAB, padded_vocab_size=VOCAB, n_layer=2, n_head=4, n_embd=128)
        self.gpt = GPT(config)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return chunked_cross_entropy(self.gpt(batch[:, :-1].long()), batch[:, 1:].long())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


_MODULES = (
    "argparse", "ast", "asyncio", "base64", "bisect", "calendar", "collections", "configparser", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools", "glob",
    "gzip", "hashlib", "heapq", "http.client", "inspect", "json", "logging", "mailbox", "os", "pathlib",
    "pickle", "pprint", "random", "re", "shutil", "socket", "statistics", "string", "subprocess",
    "tarfile", "textwrap", "threading", "typing", "unittest", "urllib.parse", "uuid", "zipfile",
)  # fmt: skip


def _docstrings() -> list[str]:
    """The docstrings of a fixed list of standard-library modules and of their members."""
    texts = []
    for name in _MODULES:
        module = importlib.import_module(name)
        texts += [inspect.getdoc(v) or "" for v in [module, *vars(module).values()] if callable(v) or v is module]
    return [t for t in texts if len(t) > 40]


def prepare(root: Path) -> tuple[Path, Tokenizer]:
    """Shards, a checkpoint folder and litdata chunks under ``root`` (the first shard: validation)."""
    docs = _docstrings()
    checkpoint = root / "checkpoint"
    checkpoint.mkdir()
    train_byte_bpe(docs, VOCAB, eos_token="</s>", bos_token="<s>").save(str(checkpoint / "tokenizer.json"))
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "GPT2Tokenizer"}))
    tokenizer = Tokenizer(checkpoint)
    data = root / "texts"
    data.mkdir()
    shards = [data / f"part{i}.txt" for i in range(4)]
    for i, shard in enumerate(shards):
        shard.write_text("\n".join(docs[i::4]))
    for out, files in (("train", shards[1:]), ("val", shards[:1])):
        optimize(
            fn=partial(text_files.tokenize, tokenizer=tokenizer), inputs=[str(f) for f in files],
            output_dir=str(data / out), num_workers=1, chunk_bytes="50MB",
            item_loader=TokensLoader(block_size=BLOCK + 1), start_method="fork",
        )  # fmt: skip
    return data, tokenizer


def seconds_to_first_batch(data: Path, tokenizer: Tokenizer, validate: bool) -> float:
    """From ``trainer.fit`` to the first train batch, with or without ``OrderValidator()``."""
    dm = TextFiles(data, num_workers=0)
    dm.connect(tokenizer, batch_size=BATCH, max_seq_length=BLOCK)
    first = _FirstBatch()
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_steps=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[first, *([OrderValidator()] if validate else [])],
    )  # fmt: skip
    torch.manual_seed(0)
    model = _Pretrain()
    start = time.perf_counter()
    trainer.fit(model, dm)
    return first.at - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/validator_litgpt_start.json, the figures the docs quote",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        data, tokenizer = prepare(Path(tmp))
        tokens = sum(f.stat().st_size for f in (data / "train").glob("*.bin")) // 4
        print(f"train chunks: {tokens:,} tokens (int32), windows of {BLOCK + 1}, batches of {BATCH}")
        added, withouts, withs = [], [], []
        for pair in range(3):
            without = seconds_to_first_batch(data, tokenizer, validate=False)
            with_validator = seconds_to_first_batch(data, tokenizer, validate=True)
            added.append(with_validator - without)
            withouts.append(without)
            withs.append(with_validator)
            print(f"pair {pair}: without {without:.3f} s, with OrderValidator() {with_validator:.3f} s")
        print(f"median added before step 1: {statistics.median(added):.3f} s")
    if args.results:
        figures = {"train_tokens": tokens, "pairs": len(added), "added_s": statistics.median(added),
                   "without_min_s": min(withouts), "without_max_s": max(withouts),
                   "with_min_s": min(withs), "with_max_s": max(withs)}  # fmt: skip
        print(f"wrote {write_results('validator_litgpt_start', figures, command_line())}")


if __name__ == "__main__":
    main()

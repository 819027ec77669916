"""litgpt as a user runs it (issue #48): its real data modules, a tiny ``litgpt.model.GPT`` and its loss.

Nothing here is glue for the validator: a BPE written as a litgpt checkpoint folder
(``tokenizer.json`` + ``tokenizer_config.json`` naming ``</s>`` / ``<s>``), read by litgpt's own
``Tokenizer``; instruction data written as litgpt's ``JSON`` expects (``instruction`` / ``input`` /
``output``), taken from the standard library's signatures and docstrings; a ``LightningModule``
whose steps are litgpt's (``finetune/full.py``: ``chunked_cross_entropy(logits[..., :-1, :],
targets[..., 1:])``; ``pretrain.py``: ``input_ids = batch[:, :-1]``, ``targets = batch[:, 1:]``);
shards for ``TinyStories`` (``TinyStories_all_data/*.json``) that its ``prepare_data`` turns into
litdata chunks with ``optimize``, as on a machine that downloaded them once.
Import it after ``pytest.importorskip("litgpt")``.
"""

from __future__ import annotations

import inspect
import json
import random
from functools import partial
from pathlib import Path
from typing import Any

import lightning.pytorch as pl  # litgpt's data modules are lightning.pytorch's
import torch
from litdata import TokensLoader, optimize
from litgpt.config import Config
from litgpt.data import text_files, tinystories
from litgpt.model import GPT
from litgpt.utils import chunked_cross_entropy

from lightning_order.data.lm.tokenizer import train_byte_bpe

# Modules whose public functions have signatures and docstrings (stable across Python versions).
_MODULES = ("textwrap", "json", "os.path", "shutil", "string", "fnmatch", "glob", "base64", "heapq", "bisect")


def stdlib_functions() -> list[tuple[str, str, str]]:
    """``(qualified name, signature, docstring)`` of the standard library's public documented functions."""
    found = []
    for module_name in _MODULES:
        module = __import__(module_name, fromlist=["_"])
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") or not callable(value) or not inspect.getdoc(value):
                continue
            try:
                signature = str(inspect.signature(value))
            except (TypeError, ValueError):  # builtins without a text signature
                continue
            found.append((f"{module_name}.{name}", signature, inspect.getdoc(value) or ""))
    return found


def instructions(long_form: bool = False) -> list[dict[str, str]]:
    """Instruction rows: name a function, answer with its signature and the first line of its docstring.

    ``long_form``: the answers are whole module docstrings too (rows of 1 000+ tokens, longer than
    a 512-entry vocabulary: litgpt's ``token_counts`` then exceed every token id).
    """
    rows = [
        {"instruction": f"Write the signature of {name} and say what it does.", "input": "",
         "output": f"def {name.rsplit('.', 1)[-1]}{signature}: {doc.splitlines()[0]}"}
        for name, signature, doc in stdlib_functions()
    ]
    if long_form:
        for module_name in ("argparse", "string", "json", "textwrap", "heapq", "pickle", "tarfile", "zipfile"):
            module = __import__(module_name)
            rows.append({"instruction": f"Document the module {module_name}.", "input": "",
                         "output": (inspect.getdoc(module) or "") * 2})
    return rows


def checkpoint_folder(folder: Path, vocab_size: int = 512) -> Path:
    """A byte-level BPE fitted on the instruction data, saved as litgpt reads a checkpoint's tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = [f"{r['instruction']}\n{r['output']}" for r in instructions(long_form=True)]
    tokenizer = train_byte_bpe(texts, vocab_size, eos_token="</s>", bos_token="<s>")
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False, "tokenizer_class": "GPT2Tokenizer"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def write_json(path: Path, rows: list[dict[str, str]]) -> Path:
    """``rows`` as the JSON list litgpt's ``JSON`` module reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def stories(count: int, seed: int = 0) -> list[dict[str, str]]:
    """TinyStories-shaped shard rows (``{"story": ...}``) made of docstring sentences."""
    sentences = [line for _, _, doc in stdlib_functions() for line in doc.splitlines() if len(line) > 20]
    rng = random.Random(seed)
    return [{"story": " ".join(rng.sample(sentences, 6))} for _ in range(count)]


class LitGPT(pl.LightningModule):
    """A tiny ``litgpt.model.GPT`` trained with litgpt's ``chunked_cross_entropy``, as its scripts do.

    Args:
        vocab_size: the model's ``padded_vocab_size`` (its embedding's rows).
        block_size: the longest row it takes.
        pretrain: batches are token windows (``pretrain.py``), else SFT dicts (``finetune/full.py``).
    """

    def __init__(self, vocab_size: int, block_size: int = 2048, pretrain: bool = False) -> None:
        super().__init__()
        config = Config(
            block_size=block_size, vocab_size=vocab_size, padded_vocab_size=vocab_size, n_layer=1,
            n_head=2, n_embd=32, bias=True, rotary_percentage=1.0, parallel_residual=False,
        )
        self.gpt = GPT(config)
        self.pretrain = pretrain

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.pretrain:
            input_ids, targets = batch[:, :-1].long(), batch[:, 1:].long()  # litdata serves int32
            return chunked_cross_entropy(self.gpt(input_ids), targets)
        logits = self.gpt(batch["input_ids"])
        return chunked_cross_entropy(logits[..., :-1, :], batch["labels"][..., 1:])

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.training_step(batch, batch_idx))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def optimize_shards(tokenize: Any, files: list[Path], out: Path, tokenizer: Any, block_size: int | None) -> Path:
    """``files`` tokenized into litdata chunks at ``out`` by litgpt's own ``tokenize``, as its
    ``prepare_data`` does, in one forked worker: litdata's default ``spawn`` start method would
    re-import the test session and set itself for every later test."""
    optimize(
        fn=partial(tokenize, tokenizer=tokenizer),
        inputs=[str(f) for f in files],
        output_dir=str(out),
        num_workers=1,
        chunk_bytes="50MB",
        item_loader=TokensLoader(block_size=block_size) if block_size else TokensLoader(),
        start_method="fork",
    )
    return out


def pretraining_shards(root: Path, tokenizer: Any, block_size: int) -> dict[str, Path]:
    """``TextFiles``' folder of ``.txt`` files and ``TinyStories``' ``TinyStories_all_data/*.json`` under
    ``root``, each optimized into ``train/`` and ``val/`` by litgpt's own ``tokenize`` (the first file:
    val); ``TextFiles`` in windows of ``block_size + 1`` tokens, as its ``prepare_data`` cuts them."""
    rows = stories(240)
    texts, tiny = root / "texts", root / "tiny"
    (tiny / "TinyStories_all_data").mkdir(parents=True)
    texts.mkdir()
    for i in range(3):
        part = rows[i * 80 : (i + 1) * 80]
        (texts / f"part{i}.txt").write_text("\n".join(r["story"] for r in part))
        (tiny / "TinyStories_all_data" / f"data{i:02d}.json").write_text(json.dumps(part))
    text_parts = sorted(texts.glob("*.txt"))
    optimize_shards(text_files.tokenize, text_parts[1:], texts / "train", tokenizer, block_size + 1)
    optimize_shards(text_files.tokenize, text_parts[:1], texts / "val", tokenizer, block_size + 1)
    tiny_parts = sorted((tiny / "TinyStories_all_data").glob("*.json"))
    optimize_shards(tinystories.tokenize, tiny_parts[1:], tiny / "train", tokenizer, None)
    optimize_shards(tinystories.tokenize, tiny_parts[:1], tiny / "val", tokenizer, None)
    return {"TextFiles": texts, "TinyStories": tiny}

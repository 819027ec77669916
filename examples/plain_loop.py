"""A nanoGPT-style plain PyTorch loop with ``OrderGuard``: the validator's proofs without a Lightning Trainer.

Real text (the docstrings of a few standard-library modules), a byte-level BPE tokenizer with
``<|endoftext|>`` (trained here, no download), windows of packed token ids as ``(x, y)`` pairs
(``y`` is ``x`` shifted by one), a tiny GPT whose loss is ``F.cross_entropy`` and a loop that
steps the optimizer itself. The guard is three lines: built beside the loaders, and its
``step()`` around the first forward and backward. It stops the run before the first
``optimizer.step()`` when the data is prepared wrong, and costs a flag check afterwards.

:func:`build` plants one classic bug on request (``bug=``), so the same loop shows each rule:

- ``"labels-shifted-twice"``: ``y`` is ``x`` shifted by two (the model shifts once more);
- ``"eos-label-masked"``: one short text per row (each docstring's summary line), padded with the
  end-of-text id as pad id and the pad labels masked, which masks every real end-of-text label too;
- ``"train-val-overlap"``: a validation set drawn from the train windows;
- ``"init-before-data"``: a model built for a smaller vocabulary than the tokenizer's.

Run it::

    python examples/plain_loop.py                              # trains, silent
    python examples/plain_loop.py --bug labels-shifted-twice   # OrderError before step 1's optimizer step
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from lightning_order import OrderGuard

EOS = "<|endoftext|>"
#: The bugs :func:`build` plants, by the rule that names each.
BUGS = ("labels-shifted-twice", "eos-label-masked", "train-val-overlap", "init-before-data")
#: nanoGPT's ignore index.
IGNORE = -1


def documents() -> list[str]:
    """Real prose: the docstrings of the functions and classes of a few standard-library modules."""
    docs = []
    for module in (json, textwrap, inspect, argparse, math):
        for _, obj in sorted(vars(module).items()):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc and len(doc) > 80 and doc not in docs:
                docs.append(doc)
    return docs


def train_tokenizer(docs: list[str], vocab_size: int = 384) -> Tokenizer:
    """A byte-level BPE tokenizer with ``<|endoftext|>`` as its one special token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(docs, trainer=trainer)
    return tokenizer


def encode(tokenizer: Tokenizer, docs: list[str]) -> list[list[int]]:
    """Each document's ids, ended by the end-of-text id."""
    eos = tokenizer.token_to_id(EOS)
    return [[*enc.ids, eos] for enc in tokenizer.encode_batch(docs)]


class Windows(Dataset):
    """Windows of ``block`` ids from one packed stream, as ``(x, y)``: ``y`` is ``x`` shifted by ``shift``."""

    def __init__(self, stream: np.ndarray, block: int, shift: int = 1) -> None:
        self.stream, self.block, self.shift = torch.as_tensor(stream, dtype=torch.long), block, shift

    def __len__(self) -> int:
        return (len(self.stream) - self.shift) // self.block

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block
        x = self.stream[start : start + self.block]
        return x, self.stream[start + self.shift : start + self.shift + self.block]


class PaddedDocuments(Dataset):
    """One document per row, cut to ``block`` ids and padded with ``pad``; labels of ``pad`` masked.

    With ``pad`` the end-of-text id (a common shortcut), the mask hides every real end-of-text label
    too: the model never learns to end a document.
    """

    def __init__(self, docs: list[list[int]], block: int, pad: int) -> None:
        self.docs, self.block, self.pad = docs, block, pad

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.docs[i][: self.block + 1]
        row = torch.full((self.block + 1,), self.pad, dtype=torch.long)
        row[: len(ids)] = torch.as_tensor(ids)
        x, y = row[:-1], row[1:].clone()
        y[y == self.pad] = IGNORE
        return x, y


class TinyGPT(nn.Module):
    """A one-block causal transformer (nanoGPT's shape): token and position tables, attention, MLP, head."""

    def __init__(self, vocab_size: int, block: int, width: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, width), nn.Embedding(block, width)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(width), nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        self.register_buffer(
            "mask", torch.triu(torch.ones(block, block, dtype=torch.bool), 1), persistent=False
        )

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        t = idx.shape[1]
        h = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        a = self.ln1(h)
        h = h + self.attn(a, a, a, attn_mask=self.mask[:t, :t], need_weights=False)[0]
        h = h + self.mlp(self.ln2(h))
        logits = self.lm_head(self.ln_f(h))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE)
        return logits, loss


@dataclass
class Run:
    """What the loop trains: the model, its loaders, the tokenizer and the optimizer."""

    model: TinyGPT
    train_loader: DataLoader
    val_loader: DataLoader
    tokenizer: Tokenizer
    optimizer: torch.optim.Optimizer


def build(bug: str | None = None, block: int = 32, batch_size: int = 8, seed: int = 0) -> Run:
    """The run, correct or with one planted bug (one of :data:`BUGS`).

    The correct one splits documents before packing (a tenth held out for validation), ends every
    document with ``<|endoftext|>``, shifts labels by one and sizes the model's tables to the tokenizer.
    """
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS} or None, got {bug!r}")
    torch.manual_seed(seed)
    docs = documents()
    held = max(1, len(docs) // 10)
    train_docs, val_docs = docs[held:], docs[:held]
    tokenizer = train_tokenizer(train_docs)
    train_ids, val_ids = encode(tokenizer, train_docs), encode(tokenizer, val_docs)
    stream = np.concatenate([np.asarray(d) for d in train_ids])
    train: Dataset = Windows(stream, block, shift=2 if bug == "labels-shifted-twice" else 1)
    if bug == "eos-label-masked":  # one short text per row (each docstring's summary line), padded
        summaries = encode(tokenizer, [d.splitlines()[0] for d in train_docs])
        train = PaddedDocuments(summaries, block, pad=tokenizer.token_to_id(EOS))
    val: Dataset = Windows(np.concatenate([np.asarray(d) for d in val_ids]), block)
    if bug == "train-val-overlap":
        val = Subset(train, range(0, len(train), 10))  # "a sample of the data", drawn from train
    vocab = tokenizer.get_vocab_size() // 2 if bug == "init-before-data" else tokenizer.get_vocab_size()
    model = TinyGPT(vocab, block)
    generator = torch.Generator().manual_seed(seed)
    return Run(
        model,
        DataLoader(train, batch_size=batch_size, shuffle=True, generator=generator, drop_last=True),
        DataLoader(val, batch_size=batch_size),
        tokenizer,
        torch.optim.AdamW(model.parameters(), lr=3e-3),
    )


def train(run: Run, steps: int = 20, guard: OrderGuard | None = None) -> list[float]:
    """The loop: ``steps`` optimizer steps; the guard (when given) wraps each step's forward and backward."""
    losses: list[float] = []
    run.model.train()
    while len(losses) < steps:
        for x, y in run.train_loader:
            with guard.step() if guard is not None else _NO_GUARD:
                _, loss = run.model(x, y)
                loss.backward()
            run.optimizer.step()
            run.optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


class _NoGuard:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_GUARD = _NoGuard()


def main(argv: list[str] | None = None) -> None:
    """Builds the run (``--bug`` plants one), guards it and trains a few steps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", choices=BUGS, default=None)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    run = build(args.bug)
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    losses = train(run, args.steps, guard)
    print(f"trained {len(losses)} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()

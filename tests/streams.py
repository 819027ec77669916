"""Hand-written train streams and loaders as LLM teams write them (zero glue), and a batch recorder.

- :class:`TokenStream`: a torchtitan-style stateful ``IterableDataset``: documents tokenized on the
  fly (characters as ids), packed into windows of ``block + 1`` tokens from a token buffer, its
  position (document index, buffer) kept on itself and exposed through ``state_dict`` /
  ``load_state_dict``; finite (one pass over its documents) unless ``loop``; a share of the
  documents per rank when ``rank`` / ``world`` are given;
- :class:`CountingStream`: the same without ``state_dict``: a counter and a buffer on itself;
- :class:`GetBatch`: nanoGPT's ``get_batch`` as an ``IterableDataset``: random windows of a token
  array drawn with the global ``torch`` generator, seeded in ``__iter__`` with ``seed`` (nanoGPT
  seeds ``1337 + rank``; the same seed on every rank is the bug);
- :class:`ShardStream`: llama2.c's ``PretokDataset``: shards of token blocks read in turn; with
  ``split_workers=False`` every loader worker reads every shard (it forgets ``get_worker_info()``:
  the bug), else each worker keeps every ``num_workers``-th block; ``repeat`` serves each block
  that many times in a row (a corpus with real duplicate documents); ``rank`` / ``world``: a share
  of the shards per rank;
- :class:`Rows`, :class:`TinyModel`: a map-style dataset of distinct token rows and a model for it;
- :class:`FirstBatches`: records a hash of each batch the run trains on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from torch.utils.data import Dataset, IterableDataset

VOCAB = 64


def documents(count: int = 40, seed: int = 0, length: int | None = None) -> list[str]:
    """Made-up documents of 30-90 characters (``length``: all of that length)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz "))
    sizes = [length or int(rng.integers(30, 90)) for _ in range(count)]
    return ["".join(rng.choice(letters, size=size)) for size in sizes]


def tokenize(text: str) -> list[int]:
    """Characters as ids, an end-of-text id (0) last."""
    return [1 + (ord(c) % (VOCAB - 1)) for c in text] + [0]


class CountingStream(IterableDataset):
    """Tokenizes documents on the fly and packs windows of ``block + 1`` tokens; its position (next
    document, token buffer) lives on the object, so a second ``iter()`` continues where the first
    stopped (no ``state_dict``)."""

    def __init__(self, docs: list[str], block: int = 16, rank: int = 0, world: int = 1) -> None:
        self.docs, self.block = docs[rank::world], block
        self.next_doc = 0
        self.buffer: list[int] = []

    def __iter__(self):
        width = self.block + 1
        while self.next_doc < len(self.docs):
            self.buffer.extend(tokenize(self.docs[self.next_doc]))
            self.next_doc += 1
            while len(self.buffer) >= width:
                window, self.buffer = self.buffer[:width], self.buffer[width:]
                ids = torch.tensor(window)
                yield {"input_ids": ids[:-1], "labels": ids[1:]}


class TokenStream(CountingStream):
    """:class:`CountingStream` with torchtitan's ``state_dict`` / ``load_state_dict``."""

    def state_dict(self) -> dict[str, Any]:
        return {"next_doc": self.next_doc, "buffer": list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_doc, self.buffer = int(state["next_doc"]), list(state["buffer"])


def stream_steps(docs: list[str], block: int, batch: int, rank: int = 0, world: int = 1) -> int:
    """How many full batches one pass of the stream yields."""
    tokens = sum(len(tokenize(d)) for d in docs[rank::world])
    return (tokens // (block + 1)) // batch


class GetBatch(IterableDataset):
    """nanoGPT's ``get_batch``: ``batches`` batches of random windows, drawn with the global torch
    generator seeded with ``seed`` when iteration starts."""

    def __init__(
        self, tokens: torch.Tensor, seed: int, block: int = 16, batch: int = 4, batches: int = 8
    ) -> None:
        self.tokens, self.seed, self.block, self.batch, self.batches = tokens, seed, block, batch, batches

    def __iter__(self):
        torch.manual_seed(self.seed)
        for _ in range(self.batches):
            starts = torch.randint(len(self.tokens) - self.block - 1, (self.batch,))
            x = torch.stack([self.tokens[i : i + self.block] for i in starts])
            y = torch.stack([self.tokens[i + 1 : i + 1 + self.block] for i in starts])
            yield x, y


class ShardStream(IterableDataset):
    """llama2.c-style shards of ``block + 1`` token windows, read in order (see the module docstring)."""

    def __init__(
        self,
        shards: int = 4,
        blocks: int = 64,
        block: int = 16,
        split_workers: bool = True,
        repeat: int = 1,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        rng = np.random.default_rng(0)
        every = [torch.from_numpy(rng.integers(1, VOCAB, size=(blocks, block + 1))) for _ in range(shards)]
        self.shards = every[rank::world]  # a share of the shards per rank, as llama2.c does
        self.split_workers, self.repeat = split_workers, repeat

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        share, of = (info.id, info.num_workers) if info is not None and self.split_workers else (0, 1)
        at = 0
        for shard in self.shards:
            for window in shard:
                if at % of == share:
                    for _ in range(self.repeat):
                        yield {"input_ids": window[:-1], "labels": window[1:]}
                at += 1


def token_array(count: int = 20_000, seed: int = 0) -> torch.Tensor:
    """A token stream (nanoGPT's ``train.bin``) of ``count`` ids below :data:`VOCAB`."""
    return torch.from_numpy(np.random.default_rng(seed).integers(0, VOCAB, size=count))


class Rows(Dataset):
    """``count`` distinct rows of 16 token ids (``input_ids``, ``labels``)."""

    def __init__(self, count: int = 256) -> None:
        rng = np.random.default_rng(0)
        self.ids = torch.from_numpy(rng.integers(0, VOCAB, size=(count, 17)))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i, :-1], "labels": self.ids[i, 1:]}


class TinyModel(pl.LightningModule):
    """An embedding and a head; batches as dicts or ``(x, y)`` tuples. ``configure_model`` is a
    no-op, so ``ModelParallelStrategy`` accepts it (the data is under test, not the layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def configure_model(self) -> None:
        pass

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = (batch["input_ids"], batch["labels"]) if isinstance(batch, dict) else batch
        logits = self.head(self.embedding(x))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def batch_hash(batch: Any) -> str:
    """A hash of a batch's token ids."""
    x = batch["input_ids"] if isinstance(batch, dict) else batch[0]
    return xxhash.xxh3_64_hexdigest(x.cpu().numpy().tobytes())


class FirstBatches(pl.Callback):
    """Records :func:`batch_hash` of every batch the run trains on."""

    def __init__(self) -> None:
        self.hashes: list[str] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.hashes.append(batch_hash(batch))

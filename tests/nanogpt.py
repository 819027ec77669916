"""A nanoGPT-style hand-written LM pipeline, as a Lightning user writes one, and the classic LLM bugs.

No lightning_order line anywhere (zero glue): an offline preparation (:func:`prepare`) writes
``train.bin`` / ``val.bin`` (token ids, memory-mapped, ``uint16`` or ``int32``) and
``tokenizer.json`` from generated prose; :class:`BinData` reads them
back as windows of ``block_size + 1`` tokens (``(x, y)`` tuples, ``y`` = ``x`` shifted by one) and
wraps the tokenizer in a ``transformers`` ``PreTrainedTokenizerFast``; :class:`TinyGPT` is a
LightningModule around a ``GPT2LMHeadModel`` built offline from a config (no download).

The correct preparation drops exact duplicate documents, then splits by a hash of each
document's text (a document and its twin land on the same side), trains a byte-level BPE on the
train documents (``<|endoftext|>`` declared as a special token) and ends every document with it.
Each bug is one argument of :func:`prepare` or one subclass that changes only what the bug
changes. Used by tests/integration/test_lm_zero_glue.py and tests/distributed/ddp_scripts/lm_zero_glue_ddp.py.
Correct variants that share phrases: ``prepare(footers=...)`` (#37). Bugs of #37: ``PackedSplitData``
(split after packing: ``random_split`` of every window, or of packed blocks, of one stream) and
``PerRankBlockData`` (another ``block_size`` on rank 1).
"""

from __future__ import annotations

import importlib
import os
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytorch_lightning
import torch
import xxhash
from torch.utils.data import DataLoader, Dataset

EOS = "<|endoftext|>"
BOS = "<s>"
VOCAB = 512
BLOCK = 32
DOCUMENTS = 400
VAL_SHARE = 0.2


_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vi", "zo", "pe", "sa", "do", "fu", "gi", "ha", "je", "ku")


@cache
def corpus(documents: int = DOCUMENTS, seed: int = 0) -> tuple[str, ...]:
    """Made-up prose (Zipf-distributed words, 20-120 of them in 2-4 lines), exact duplicates dropped
    (the correct pipeline's dedup); ``seed`` gives another corpus of the same size. Generated, not
    read, so a test prepares it in milliseconds."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(_SYLLABLES, size=int(rng.integers(1, 4)))) for _ in range(400)]
    weights = 1.0 / np.arange(1, len(words) + 1)
    docs = []
    for _ in range(documents):
        picked = rng.choice(words, size=int(rng.integers(20, 120)), p=weights / weights.sum())
        lines = np.array_split(picked, int(rng.integers(2, 5)))
        docs.append("\n".join(" ".join(line) for line in lines).capitalize() + ".")
    return tuple(dict.fromkeys(docs))


def with_footers(docs: list[str], share: float, seed: int = 0) -> list[str]:
    """``share`` of the documents end with one of three fixed footers (~50 tokens each, web
    boilerplate): distinct documents that share a phrase longer than a window, never twins."""
    words = np.random.default_rng(7)  # the same three footers on both sides
    footers = [
        " ".join("".join(words.choice(_SYLLABLES, size=3)) for _ in range(int(words.integers(30, 40))))
        for _ in range(3)
    ]
    rng = np.random.default_rng(seed)
    return [d + "\n" + footers[i % 3] if rng.random() < share else d for i, d in enumerate(docs)]


def split(docs: tuple[str, ...], seed: int = 0) -> tuple[list[str], list[str]]:
    """By a hash of each document's text: a document and its exact twin land on the same side."""
    to_val = [xxhash.xxh64_intdigest(d.encode(), seed=seed) % 1000 < VAL_SHARE * 1000 for d in docs]
    return [d for d, v in zip(docs, to_val) if not v], [d for d, v in zip(docs, to_val) if v]


def train_tokenizer(docs: list[str], vocab_size: int = VOCAB, bos: bool = False) -> Any:
    """A byte-level BPE (``tokenizers``) with ``<|endoftext|>`` (and ``<s>`` with ``bos``) declared special."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, BOS] if bos else [EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(docs, trainer=trainer)
    return tokenizer


def encode(tokenizer: Any, docs: list[str], eos: bool = True, bos: bool = False) -> np.ndarray:
    """One stream of token ids: each document's ids, then one end-of-text id (unless ``eos=False``);
    ``bos``: each document opened with ``<s>`` first (Llama's ``add_bos_token``)."""
    end = [tokenizer.token_to_id(EOS)] if eos else []
    start = [tokenizer.token_to_id(BOS)] if bos else []
    return np.concatenate(
        [np.asarray(start + e.ids + end, dtype=np.int64) for e in tokenizer.encode_batch(docs)]
    )


def write_bin(path: Path, ids: np.ndarray, dtype: Any) -> None:
    """nanoGPT's ``train.bin``: the ids as a flat memory-mapped array of ``dtype``."""
    out = np.memmap(path, dtype=dtype, mode="w+", shape=ids.shape)
    out[:] = ids
    out.flush()


def prepare(
    folder: Path,
    *,
    documents: int = DOCUMENTS,
    seed: int = 0,
    vocab_size: int = VOCAB,
    eos: bool = True,
    bos: bool = False,
    twins: float = 0.0,
    dtype: Any = np.uint16,
    footers: float = 0.0,
) -> dict[str, Any]:
    """The offline preparation: ``train.bin``, ``val.bin``, ``tokenizer.json`` in ``folder``.

    Args:
        folder: where the files go.
        documents: how many documents to generate; ``seed`` picks another corpus of that size.
        vocab_size: the tokenizer's size.
        eos: end every document with ``<|endoftext|>`` (``False``: the no-boundary bug).
        bos: declare ``<s>`` and open every document with it (with ``eos=False``: Llama's
            BOS-first packing, whose boundaries are the ``<s>`` ids).
        twins: the share of validation documents replaced by an exact copy of a train document
            (the leak a split without dedup makes).
        dtype: the ids' dtype on disk.
        footers: the share of documents (both splits) ending with a shared footer
            (:func:`with_footers`): a correct pipeline whose splits share phrases.

    Returns:
        What was written: the split sizes, the share of validation tokens in twins.
    """
    folder.mkdir(parents=True, exist_ok=True)
    train, val = split(corpus(documents, seed))
    if footers:
        train, val = with_footers(train, footers), with_footers(val, footers, seed=1)
    planted = 0
    if twins:
        rng = np.random.default_rng(0)
        picked = rng.choice(len(val), size=round(twins * len(val)), replace=False)
        copies = rng.choice(len(train), size=len(picked), replace=False)
        for i, j in zip(picked, copies):
            val[i] = train[j]
        planted = len(picked)
    tokenizer = train_tokenizer(train, vocab_size, bos)
    tokenizer.save(str(folder / "tokenizer.json"))
    train_ids, val_ids = encode(tokenizer, train, eos, bos), encode(tokenizer, val, eos, bos)
    write_bin(folder / "train.bin", train_ids, dtype)
    write_bin(folder / "val.bin", val_ids, dtype)
    return {
        "dtype": np.dtype(dtype).name,
        "train_docs": len(train),
        "val_docs": len(val),
        "twins": planted,
        "train_tokens": len(train_ids),
        "val_tokens": len(val_ids),
    }


class Windows(Dataset):
    """Every window of ``block_size + 1`` tokens of a memory-mapped ``.bin`` (nanoGPT's data)."""

    def __init__(self, path: Path, block_size: int, dtype: Any) -> None:
        self.data = np.memmap(path, dtype=dtype, mode="r")
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = torch.from_numpy(self.data[i : i + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def build(ns: ModuleType = pytorch_lightning) -> tuple[type, type]:
    """The correct ``(BinData, TinyGPT)`` on ``ns`` (``pytorch_lightning`` or ``lightning.pytorch``)."""

    class BinData(ns.LightningDataModule):
        """``train.bin`` / ``val.bin`` as random windows; ``tokenizer`` the fast tokenizer in use."""

        def __init__(
            self, folder: Path, block_size: int = BLOCK, batch_size: int = 8, dtype: Any = np.uint16
        ):
            super().__init__()
            self.folder, self.block_size, self.batch_size, self.dtype = (
                Path(folder),
                block_size,
                batch_size,
                dtype,
            )
            self.tokenizer: Any = None

        def load_tokenizer(self) -> Any:
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast(tokenizer_file=str(self.folder / "tokenizer.json"))

        def setup(self, stage: str) -> None:
            if self.tokenizer is None:  # Lightning calls setup again in fit: keep the one in use
                self.tokenizer = self.load_tokenizer()
            self.train_set = Windows(self.folder / "train.bin", self.block_size, self.dtype)
            self.val_set = Windows(self.folder / "val.bin", self.block_size, self.dtype)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val_set, batch_size=self.batch_size)

    class TinyGPT(ns.LightningModule):
        """A one-layer ``GPT2LMHeadModel`` built from a config (no download)."""

        def __init__(self, vocab_size: int, block_size: int = BLOCK) -> None:
            super().__init__()
            from transformers import GPT2Config, GPT2LMHeadModel

            config = GPT2Config(
                n_layer=1, n_head=2, n_embd=32, vocab_size=vocab_size, n_positions=block_size,
                bos_token_id=0, eos_token_id=0,
            )  # fmt: skip
            self.model = GPT2LMHeadModel(config)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            logits = self.model(input_ids=x).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            logits = self.model(input_ids=x).logits
            self.log("val_loss", torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return BinData, TinyGPT


BinData, TinyGPT = build()


# -- the classic bugs, each changing only what it changes ------------------------------------------
class LatePadData(BinData):
    """A pad token added in ``setup`` (for later padding), the model sized from ``tokenizer.vocab_size``,
    which does not count added tokens: 513 tokens, 512 rows."""

    def load_tokenizer(self) -> Any:
        tokenizer = super().load_tokenizer()
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
        return tokenizer


class PerRankTokenizerData(BinData):
    """Each process trains its own tokenizer in ``setup`` (on text of its own): same size, different
    vocabularies (under DDP the rank is ``LOCAL_RANK``, set by Lightning's launcher)."""

    def load_tokenizer(self) -> Any:
        from transformers import PreTrainedTokenizerFast

        rank = int(os.environ.get("LOCAL_RANK", "0"))
        return PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(list(corpus(DOCUMENTS, seed=rank))))


class PerRankBlockData(BinData):
    """The block size read per process (``BLOCK`` on rank 0, twice that on rank 1: a per-rank
    config or environment variable); the tokenizer and files are the same on every rank."""

    def __init__(self, folder: Path, **kwargs: Any) -> None:
        super().__init__(folder, **kwargs)
        self.block_size = BLOCK * (1 + int(os.environ.get("LOCAL_RANK", "0")))


class PackedSplitData(BinData):
    """Split after packing: the windows of one stream of every document (``train.bin`` then
    ``val.bin``), ``random_split`` 90/10 with a seeded generator, so every document has windows on
    both sides; ``stride`` 1 is nanoGPT's every window, ``block_size + 1`` packed blocks."""

    def __init__(self, folder: Path, stride: int = 1, **kwargs: Any) -> None:
        super().__init__(folder, **kwargs)
        self.stride = stride

    def setup(self, stage: str) -> None:
        super().setup(stage)
        both = np.concatenate([np.asarray(self.train_set.data), np.asarray(self.val_set.data)])
        windows = _Strided(both, self.block_size, self.stride)
        generator = torch.Generator().manual_seed(0)
        self.train_set, self.val_set = torch.utils.data.random_split(windows, [0.9, 0.1], generator=generator)


class _Strided(Dataset):
    """Windows of ``block_size + 1`` tokens of one array, ``stride`` tokens apart."""

    def __init__(self, data: np.ndarray, block_size: int, stride: int) -> None:
        self.data, self.block_size, self.stride = data, block_size, stride

    def __len__(self) -> int:
        return (len(self.data) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.stride
        chunk = torch.from_numpy(self.data[start : start + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


class _Documents(Dataset):
    def __init__(self, rows: list[torch.Tensor]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rows[i][:-1], self.rows[i][1:]


class PadUsedData(LatePadData):
    """The same late pad token, then used: one row per document, its first ``block_size + 1`` tokens,
    padded when shorter (the fine-tuning layout)."""

    def documents(self, name: str) -> _Documents:
        data = np.asarray(np.memmap(self.folder / f"{name}.bin", dtype=self.dtype, mode="r"), dtype=np.int64)
        eos, pad, width = (
            self.tokenizer.convert_tokens_to_ids(EOS),
            self.tokenizer.pad_token_id,
            self.block_size + 1,
        )
        ends = np.flatnonzero(data == eos)
        rows = []
        for start, end in zip(np.r_[0, ends[:-1] + 1], ends + 1):
            piece = data[start:end][:width]
            rows.append(torch.from_numpy(np.pad(piece, (0, width - len(piece)), constant_values=pad)))
        return _Documents(rows)

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.train_set, self.val_set = self.documents("train"), self.documents("val")


def namespace(name: str) -> ModuleType:
    """``pytorch_lightning`` or ``lightning.pytorch``."""
    return importlib.import_module(name)

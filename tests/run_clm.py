"""Shape A of issue #37: the ``run_clm.py`` pattern, as a Lightning user writes it, and its classic bugs.

No lightning_order line anywhere (zero glue): a ``datasets.Dataset`` of documents, tokenized by
``tokenizer(...)`` in ``.map(batched=True)`` (every document closed with the end-of-text id),
``group_texts`` concatenating them into blocks of ``block_size`` tokens,
``transformers.DataCollatorForLanguageModeling(mlm=False)`` making ``labels`` (the model shifts
them), and a tiny ``GPT2LMHeadModel`` built from a config. The tokenizer is a
``PreTrainedTokenizerFast`` around a byte-level BPE trained with ``tokenizers`` on the train
documents, ``<|endoftext|>`` and ``<pad>`` declared special.

The text preparation here (:func:`documents`, :func:`split_documents`, :func:`train_bpe`) is
shared with tests/llama_style.py (shape C); shape B is tests/nanogpt.py. Each planted bug is one
keyword of :class:`ClmData` (defaults: the correct pipeline). Used by
tests/integration/test_zero_glue_matrix.py.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from nanogpt import corpus
from torch.utils.data import DataLoader, DistributedSampler

EOS = "<|endoftext|>"
PAD = "<pad>"
VOCAB = 512
BLOCK = 32
DOCUMENTS = 400
VAL_SHARE = 0.2
#: The share of documents given an exact twin before the (planted) dedup.
TWINS = 0.2


@cache
def documents(
    n: int = DOCUMENTS, seed: int = 0, *, html: bool = False, twins: bool = False
) -> tuple[str, ...]:
    """tests/nanogpt.py's made-up prose; ``html``: as scraped (markup around every line, the raw text a
    cleaning step strips); ``twins``: :data:`TWINS` of the documents repeated (exact duplicates)."""
    docs = list(corpus(n, seed))
    if twins:
        rng = np.random.default_rng(seed)
        docs += [docs[i] for i in rng.choice(len(docs), size=round(TWINS * len(docs)), replace=False)]
        docs = [docs[i] for i in rng.permutation(len(docs))]
    if html:
        docs = [
            '<div class="post"><p>' + "</p>\n<p>".join(d.split("\n")) + '</p><a href="/next">next</a></div>'
            for d in docs
        ]
    return tuple(docs)


def clean(text: str) -> str:
    """The cleaning step: markup stripped (what the scraped text becomes)."""
    return re.sub(r"<a [^>]*>.*?</a>|<[^>]+>", "", text)


def split_documents(docs: tuple[str, ...], *, dedup: str = "before") -> tuple[list[str], list[str]]:
    """Train and validation documents.

    Args:
        docs: the corpus.
        dedup: ``"before"`` (correct): exact duplicates dropped, then a split by a hash of each
            document's text; ``"after"`` (the bug): a random split, then each side deduplicated on
            its own, so twins straddle it.
    """
    if dedup == "before":
        unique = list(dict.fromkeys(docs))
        to_val = [xxhash.xxh64_intdigest(d.encode()) % 1000 < VAL_SHARE * 1000 for d in unique]
        return [d for d, v in zip(unique, to_val) if not v], [d for d, v in zip(unique, to_val) if v]
    order = np.random.default_rng(1).permutation(len(docs))
    cut = round(len(docs) * (1 - VAL_SHARE))
    train, val = [docs[i] for i in order[:cut]], [docs[i] for i in order[cut:]]
    return list(dict.fromkeys(train)), list(dict.fromkeys(val))


def train_bpe(texts: list[str], specials: tuple[str, ...], vocab_size: int = VOCAB) -> Any:
    """A byte-level BPE (``tokenizers``) with ``specials`` declared special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def prepared_text(
    *, bpe_on: str = "train", dedup: str = "before", seed: int = 0, documents_n: int = DOCUMENTS
) -> tuple[list[str], list[str], list[str]]:
    """``(train, val, bpe_texts)``: the cleaned splits and the text the BPE is trained on.

    Args:
        bpe_on: ``"train"`` (correct): the cleaned train documents; ``"all"``: train and validation;
            ``"raw"``: the scraped train documents, markup included (cleaned afterwards).
        dedup: see :func:`split_documents` (with ``"after"`` the corpus holds twins).
        seed: another corpus of the same size (a re-tokenized resume trains its BPE on it).
        documents_n: documents generated.
    """
    raw = documents(documents_n, seed, html=True, twins=dedup == "after")
    train_raw, val_raw = split_documents(raw, dedup=dedup)
    train, val = [clean(d) for d in train_raw], [clean(d) for d in val_raw]
    bpe_texts = {"train": train, "all": train + val, "raw": train_raw}[bpe_on]
    return train, val, bpe_texts


def seat() -> tuple[int, int]:
    """``(rank, world size)`` of this process in the process group (``(0, 1)`` outside one)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def group_texts(examples: dict[str, list], block_size: int = BLOCK) -> dict[str, list]:
    """run_clm.py's ``group_texts``: every column concatenated, cut into blocks, the remainder dropped."""
    concatenated = {k: [t for row in examples[k] for t in row] for k in examples}
    total = (len(concatenated["input_ids"]) // block_size) * block_size
    return {k: [v[i : i + block_size] for i in range(0, total, block_size)] for k, v in concatenated.items()}


class ClmData(pl.LightningDataModule):
    """run_clm.py's data as a LightningDataModule; every keyword but the first two plants a bug.

    Args:
        block_size: tokens per block.
        batch_size: blocks per batch.
        pad_is_eos: ``pad_token = eos_token`` (no ``<pad>``): the collator masks every pad label, so
            every end-of-text label is -100.
        split_blocks: the blocks of all documents split at random after packing (blocks of one
            document on both sides).
        bpe_on: see :func:`prepared_text` (``"all"``, ``"raw"``: the tokenizer bugs).
        dedup: see :func:`split_documents` (``"after"``: the bug).
        max_length: ``tokenizer(..., truncation=True, max_length=max_length)``: every document cut.
        shift_labels: labels shifted by one in the collator, for a model that shifts them again.
        sampler: ``"lightning"`` (correct: Lightning's distributed sampler), ``"seed-rank"``: a
            ``DistributedSampler(seed=rank)``; ``"all"``: every rank reads all data (with
            ``use_distributed_sampler=False``).
        tokenizer_seed: the BPE trained on another corpus of the same size (a re-tokenized resume).
    """

    def __init__(
        self,
        block_size: int = BLOCK,
        batch_size: int = 8,
        *,
        pad_is_eos: bool = False,
        split_blocks: bool = False,
        bpe_on: str = "train",
        dedup: str = "before",
        max_length: int | None = None,
        shift_labels: bool = False,
        sampler: str = "lightning",
        tokenizer_seed: int = 0,
    ) -> None:
        super().__init__()
        self.block_size, self.batch_size = block_size, batch_size
        self.pad_is_eos, self.split_blocks, self.bpe_on, self.dedup = pad_is_eos, split_blocks, bpe_on, dedup
        self.max_length, self.shift_labels, self.sampler = max_length, shift_labels, sampler
        self.tokenizer_seed = tokenizer_seed
        self.tokenizer: Any = None

    def _tokenizer(self, bpe_texts: list[str]) -> Any:
        from transformers import PreTrainedTokenizerFast

        if self.tokenizer_seed:
            bpe_texts = prepared_text(seed=self.tokenizer_seed)[2]
        specials = (EOS,) if self.pad_is_eos else (EOS, PAD)
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=train_bpe(bpe_texts, specials), eos_token=EOS)
        tokenizer.pad_token = tokenizer.eos_token if self.pad_is_eos else PAD
        return tokenizer

    def _blocks(self, texts: list[str]) -> Any:
        from datasets import Dataset

        eos = self.tokenizer.eos_token_id

        def tokenize(batch: dict[str, list]) -> dict[str, list]:
            options = {"truncation": True, "max_length": self.max_length} if self.max_length else {}
            out = self.tokenizer(batch["text"], **options)
            return {
                "input_ids": [[*ids, eos] for ids in out["input_ids"]],
                "attention_mask": [[*m, 1] for m in out["attention_mask"]],
            }

        data = Dataset.from_dict({"text": texts}).map(tokenize, batched=True, remove_columns=["text"])
        return data.map(group_texts, batched=True, fn_kwargs={"block_size": self.block_size})

    def setup(self, stage: str) -> None:
        if self.tokenizer is not None:  # Lightning calls setup again in fit: keep what was built
            return
        train, val, bpe_texts = prepared_text(bpe_on=self.bpe_on, dedup=self.dedup)
        self.tokenizer = self._tokenizer(bpe_texts)
        if self.split_blocks:
            blocks = self._blocks(train + val).shuffle(seed=0).train_test_split(test_size=VAL_SHARE, seed=0)
            self.train_set, self.val_set = blocks["train"], blocks["test"]
        else:
            self.train_set, self.val_set = self._blocks(train), self._blocks(val)
        self.train_set.set_format("torch")
        self.val_set.set_format("torch")

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        """``DataCollatorForLanguageModeling(mlm=False)``; with ``shift_labels``, labels shifted by one."""
        from transformers import DataCollatorForLanguageModeling

        batch = DataCollatorForLanguageModeling(self.tokenizer, mlm=False)(features)
        if self.shift_labels:
            shifted = torch.full_like(batch["labels"], -100)
            shifted[:, :-1] = batch["labels"][:, 1:]
            batch["labels"] = shifted
        return batch

    def train_dataloader(self) -> DataLoader:
        if self.sampler == "seed-rank":
            rank, world = seat()
            sampler = DistributedSampler(self.train_set, num_replicas=world, rank=rank, seed=rank)
            return DataLoader(self.train_set, self.batch_size, sampler=sampler, collate_fn=self.collate)
        return DataLoader(self.train_set, self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, self.batch_size, collate_fn=self.collate)


class HFModule(pl.LightningModule):
    """A ``transformers`` causal LM trained on ``model(**batch).loss``, as a team wraps one (shapes A and C)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self.model(**batch).loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class ClmModel(HFModule):
    """A one-layer ``GPT2LMHeadModel`` from a config (no download)."""

    def __init__(self, vocab_size: int, block_size: int = BLOCK) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            n_layer=1, n_head=2, n_embd=32, vocab_size=vocab_size, n_positions=block_size,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        super().__init__(GPT2LMHeadModel(config))

"""``OrderedLMDataModule``: causal language-modelling data in the mandated order, on the same machinery.

The thin shell of :class:`~lightning_order.data.OrderedDataModule`, running the steps of
:data:`~lightning_order.data.lm.steps.LM_STEPS` in the order of
:data:`~lightning_order.LM_PIPELINE`: the order is checked at construction (a dry run judged by
the pipeline), ``prepare_data`` runs the steps before ``shard`` once (rank 0, under a file lock,
into a cache folder named by the pipeline fingerprint, published atomically and verified before
use), ``setup`` runs ``shard`` on every rank. Batches are ``{"input_ids", "labels"}``, long,
``B × block_size``; ``labels`` are ``input_ids`` shifted by one.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, Dataset

import lightning_order.data.lm.steps  # noqa: F401  (registers the LM steps)
from lightning_order import compat as pl
from lightning_order.data.engine.datamodule import PreparedCache
from lightning_order.data.engine.inputs import InputHash
from lightning_order.data.engine.loaders import make_loader
from lightning_order.data.engine.runner import DataState, StepContext, resolve_order, run_steps, split_phases
from lightning_order.data.lm.artefacts import read_blocks, read_documents, write_lm_prepared
from lightning_order.data.lm.config import EOS_TOKEN, LMConfig
from lightning_order.data.lm.steps import LM_STEPS
from lightning_order.errors import OrderError
from lightning_order.fingerprints import tokenizer_fingerprint
from lightning_order.ledger import StepLedger, fingerprint
from lightning_order.order import LM_PIPELINE
from lightning_order.rules import Violation

__all__ = ["LM_BATCH_KEYS", "LM_DATA_STEPS", "BlockDataset", "OrderedLMDataModule"]

#: The keys of every LM batch.
LM_BATCH_KEYS: tuple[str, ...] = ("input_ids", "labels")
#: The data steps of :data:`LM_PIPELINE`, in the mandated order.
LM_DATA_STEPS: tuple[str, ...] = tuple(LM_PIPELINE.subset(LM_STEPS))


class BlockDataset(Dataset):
    """Packed blocks as ``{"input_ids": block[:-1], "labels": block[1:]}`` (long tensors).

    ``__getitems__`` slices a whole batch with one numpy fancy index, so a batch costs one copy.
    """

    def __init__(self, blocks: np.ndarray) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        block = torch.from_numpy(np.asarray(self.blocks[index], dtype=np.int64))
        return {"input_ids": block[:-1], "labels": block[1:]}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        blocks = torch.from_numpy(
            np.asarray(self.blocks[np.asarray(indices, dtype=np.int64)], dtype=np.int64)
        )
        return {"input_ids": blocks[:, :-1], "labels": blocks[:, 1:]}


def collate_blocks(items: Any) -> dict[str, torch.Tensor]:
    """A batch from ``BlockDataset.__getitems__`` (already stacked) or from a list of items."""
    if isinstance(items, dict):
        return items
    return {key: torch.stack([item[key] for item in items]) for key in LM_BATCH_KEYS}


class OrderedLMDataModule(PreparedCache, pl.LightningDataModule):
    """A LightningDataModule that prepares causal LM data in the order of :data:`~lightning_order.LM_PIPELINE`.

    ``load → clean → dedup → split → build_vocab → encode → pack`` run once in ``prepare_data``;
    ``shard`` runs in ``setup`` on every rank. Reading :attr:`dims` prepares the data (or reads
    the cache), so the model is built from it: ``OrderedCausalLM(**dm.dims)``.

    Example:
        >>> dm = OrderedLMDataModule(max_documents=500, vocab_size=1024, block_size=64)  # doctest: +SKIP
        >>> model = OrderedCausalLM(**dm.dims)  # doctest: +SKIP

    Args:
        dataset: anything :func:`datasets.load_dataset` takes (``"text"``, ``"json"``,
            ``"parquet"``... with ``data_files``, or a hub name already in the local cache);
            ``None`` for the built-in corpus: the documentation of Python's standard library,
            the same for a given Python version.
        data_files: files for ``dataset`` (a path, a list, a glob, a folder, or a dict).
        text_column: the column holding each document's text.
        val_fraction: the validation share of documents, in (0, 1).
        seed: seeds the split, the MinHash permutations and the train shuffling.
        vocab_size: the byte-level BPE's target size, the end-of-text token included (ignored
            with ``tokenizer_file``).
        batch_size: blocks per batch.
        num_workers: dataloader worker processes.
        num_proc: kept for the keyword contract of ``OrderedDataModule`` (the LM steps run in
            Rust and numpy in one process).
        cache_dir: the cache root; default ``$LIGHTNING_ORDER_CACHE`` or ``~/.cache/lightning_order``.
        order: the data steps to run, in order (a permutation or subset of ``load, clean,
            dedup, split, build_vocab, encode, pack, shard``); ``None`` for the mandated order.
        enforce: refuse an order that breaks the pipeline's rules (``OrderError`` at
            construction); ``False`` runs it as asked and records what really happened.
        block_size: tokens per training sequence; blocks of ``block_size + 1`` are stored.
        tokenizer_file: a local ``tokenizer.json`` to use instead of training one (recorded by
            content hash); it must hold the end-of-text token ``<|endoftext|>``.
        pad_vocab_multiple: ``padded_vocab_size`` is the tokenizer size rounded up to this.
        dedup_threshold: word 5-gram Jaccard similarity from which two documents are
            near-duplicates (MinHash LSH).
        max_documents: read at most this many documents (``None``: all).
        dataset_config: the configuration name passed to ``load_dataset``.
        load_split: the split of ``load_dataset`` to read (it is re-split by document).
        input_hash: how input files enter the cache key: ``"content"`` (xxh3 of the bytes) or
            ``"size_mtime"``.
        shuffle: shuffle the train blocks each epoch (seeded).
        eos: end every document with the end-of-text token. ``False`` packs documents without
            boundaries (``pack-without-eos``: refused unless ``enforce=False``; for experiments).
    """

    def __init__(
        self,
        dataset: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_column: str = "text",
        val_fraction: float = 0.1,
        seed: int = 0,
        vocab_size: int = 8000,
        batch_size: int = 32,
        num_workers: int = 0,
        num_proc: int = 1,
        cache_dir: str | None = None,
        order: Sequence[str] | None = None,
        enforce: bool = True,
        block_size: int = 128,
        tokenizer_file: str | None = None,
        pad_vocab_multiple: int = 64,
        dedup_threshold: float = 0.8,
        max_documents: int | None = None,
        dataset_config: str | None = None,
        load_split: str = "train",
        input_hash: InputHash = "content",
        shuffle: bool = True,
        eos: bool = True,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.config = LMConfig.from_arguments(locals())
        self.batch_size, self.num_workers, self.cache_dir = int(batch_size), int(num_workers), cache_dir
        self.seed, self.shuffle, self.enforce = int(seed), bool(shuffle), bool(enforce)
        self.pipeline = LM_PIPELINE
        self.order: tuple[str, ...] = resolve_order(
            order,
            LM_STEPS,
            LM_PIPELINE,
            self.config,
            enforce=self.enforce,
            final="shard",
            owner="OrderedLMDataModule",
        )
        if not self.config.eos and self.enforce:
            raise OrderError(
                [
                    Violation(
                        "pack-without-eos",
                        ("pack", "encode"),
                        "OrderedLMDataModule(eos=False) would concatenate documents without an end-of-text token",
                    )
                ],
                header="OrderedLMDataModule(eos=False) breaks the LM pipeline; pass enforce=False to run it anyway:",
            )
        #: The pipeline fingerprint: the hash of everything that shapes the prepared data.
        self.cache_key: str = fingerprint("lightning_order.lm", self.config.identity(self.order))
        self._ledger: StepLedger | None = None
        self._tokenizer: Tokenizer | None = None
        self._train: np.ndarray | None = None
        self._val: np.ndarray | None = None
        self._doc_hashes: dict[str, np.ndarray] = {}
        self._setup_key: tuple[Any, ...] | None = None
        self._verified: str | None = None
        self.shard_info: dict[str, int] = {}

    # -- the cache (the rest: PreparedCache in data/shell.py) ----------------------------------
    def _context(self, work: Path | None = None, world: int = 1, rank: int = 0) -> StepContext:
        return StepContext(self.config, work=work, rank=rank, world_size=world)

    def _prepare_into(self, folder: Path) -> None:
        work = folder / "work"
        work.mkdir()
        steps, per_rank = split_phases(self.order, LM_STEPS)
        info = {"cache_key": self.cache_key, "order": list(self.order), "per_rank_steps": per_rank}
        ledger = StepLedger(info={**info, "pipeline": "lm", "config": self.config.identity(self.order)})
        state = run_steps(steps, LM_STEPS, self._context(work), DataState(), ledger)
        shutil.rmtree(work, ignore_errors=True)
        write_lm_prepared(folder, state, ledger, self.config.pad_vocab_multiple)

    # -- what the model and the checks read ------------------------------------------------
    @property
    def padded_vocab_size(self) -> int:
        """The embedding rows a model gets: ``vocab_size`` rounded up to ``pad_vocab_multiple``."""
        return self.dims["padded_vocab_size"]

    @property
    def block_size(self) -> int:
        """Tokens per training sequence."""
        return self.config.block_size

    @property
    def eos_token_id(self) -> int:
        """The id of the end-of-text token ``<|endoftext|>``."""
        return int(self._manifest().info["eos_id"])

    @property
    def eos_token(self) -> str:
        """The end-of-text token."""
        return EOS_TOKEN

    def documents(self, split: str) -> list[str]:
        """The cleaned, deduplicated documents of ``split`` (``"train"`` or ``"val"``), in corpus order."""
        return read_documents(self._ensure_prepared(), split)

    def data_fingerprints(self) -> dict[str, str]:
        """``{"manifest", "split", "vocab", "corpus", "tokenizer"}``: what every rank and a resumed run must share.

        ``tokenizer`` is the fingerprint of the tokenizer object in use now, so a token added to
        it after preparation shows (it equals ``vocab`` while nothing changed).
        """
        fps = {k: str(v) for k, v in self._manifest().info["data_fingerprints"].items()}
        fps["tokenizer"] = tokenizer_fingerprint(self.tokenizer)
        return fps

    def key_hashes(self, split: str) -> np.ndarray | None:
        """The document hashes (int64) of the train or validation split; ``None`` before ``setup``."""
        return self._doc_hashes.get(split)

    # -- Lightning hooks -------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Loads the cache on this rank and runs ``shard``: every ``world_size``-th train block."""
        trainer = getattr(self, "trainer", None)
        world, rank = (int(trainer.world_size), int(trainer.global_rank)) if trainer else (1, 0)
        key = (self.cache_key, world, rank)
        if self._setup_key == key:
            return
        path = self._ensure_prepared()
        ledger = StepLedger.load(path)
        ledger.rank = rank
        arrays = read_blocks(path)
        state = DataState(parts={"train": arrays["train"], "val": arrays["val"]}, form="packed")
        per_rank = split_phases(self.order, LM_STEPS)[1]
        state = run_steps(per_rank, LM_STEPS, self._context(None, world, rank), state, ledger)
        self._train, self._val = state.parts["train"], state.parts["val"]
        self._doc_hashes = {"train": arrays["train_doc_hashes"], "val": arrays["val_doc_hashes"]}
        self._ledger = ledger
        shard = ledger.latest("shard")
        stats = shard.stats if shard is not None else {"length": len(self._train), "dropped": 0}
        self.shard_info = {
            "rank": rank,
            "world_size": world,
            "length": stats["length"],
            "dropped": stats["dropped"],
        }
        self._setup_key = key

    def _loader(self, blocks: np.ndarray | None, shuffle: bool) -> DataLoader:
        data = None if blocks is None else BlockDataset(blocks)
        return make_loader(data, self.batch_size, shuffle, self.seed, self.num_workers, collate_blocks)

    def train_dataloader(self) -> DataLoader:
        """Batches of this rank's train blocks (``input_ids``, ``labels``: long, B × block_size)."""
        return self._loader(self._train, self.shuffle)

    def val_dataloader(self) -> DataLoader:
        """Batches of every validation block (the same on every rank)."""
        return self._loader(self._val, False)

    def test_dataloader(self) -> DataLoader:
        """The validation blocks again (this module splits train/validation only)."""
        return self._loader(self._val, False)

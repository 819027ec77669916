"""``OrderedLMDataModule``: causal language-modelling data in the mandated order, on the same machinery.

The thin shell of :class:`~lightning_order.data.OrderedDataModule`, running the steps of
:data:`~lightning_order.data.lm.steps.LM_STEPS` in the order of
:data:`~lightning_order.LM_PIPELINE`: the order is checked at construction (a dry run judged by
the pipeline), ``prepare_data`` runs the steps before ``shard`` once (rank 0, under a file lock,
into a cache folder named by the pipeline fingerprint, published atomically and verified before
use), ``setup`` runs ``shard`` on every rank. Batches are ``{"input_ids", "labels"}``, long,
``B × block_size``: ``labels`` are ``input_ids`` shifted by one (``batch_format="shifted"``), or,
for ``transformers`` causal LMs that shift labels themselves (``batch_format="hf"``), equal to
``input_ids``, with an ``attention_mask``; ``"auto"`` chooses at ``setup`` from the trainer's model.
``document_attention=True`` adds per-document ``position_ids`` (:mod:`lightning_order.models.attention`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from lightning_order.data.engine.arguments import config_constructor
from lightning_order.data.engine.config import document_arguments, override_identity
from lightning_order.data.engine.datamodule import OrderedDataModuleBase
from lightning_order.data.engine.eval_shares import make_share_loader
from lightning_order.data.engine.runner import DataState
from lightning_order.data.lm.artefacts import read_blocks, read_documents
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.documents import clean_document
from lightning_order.data.lm.hf_tokenizer import hf_tokenizer_of, save_beside_checkpoints
from lightning_order.data.lm.shard import BlockView
from lightning_order.data.lm.spec import NAME
from lightning_order.data.lm.steps import LM_DATA_STEPS
from lightning_order.fingerprints import tokenizer_fingerprint
from lightning_order.ledger import StepLedger
from lightning_order.models.attention import document_positions
from lightning_order.models.hf import hf_causal_lm
from lightning_order.models.token_loss import IGNORE_INDEX

__all__ = [
    "HF_BATCH_KEYS",
    "LM_BATCH_KEYS",
    "LM_DATA_STEPS",
    "BlockDataset",
    "OrderedLMDataModule",
    "block_batch",
    "choose_batch_format",
    "document_batch",
]

#: The keys of every LM batch.
LM_BATCH_KEYS: tuple[str, ...] = ("input_ids", "labels")
#: The keys of a ``batch_format="hf"`` batch: every LM batch key and the attention mask.
HF_BATCH_KEYS: tuple[str, ...] = (*LM_BATCH_KEYS, "attention_mask")


def block_batch(
    blocks: torch.Tensor, batch_format: str = "shifted", eos_id: int | None = None
) -> dict[str, torch.Tensor]:
    """The batch (or item) of stored blocks of ``block_size + 1`` tokens, in ``batch_format``.

    ``"shifted"``: ``input_ids = block[:-1]``, ``labels = block[1:]`` (the model does not shift).
    ``"hf"``: ``input_ids = labels = block[:-1]`` and an all-ones ``attention_mask``: a
    ``transformers`` causal LM shifts the labels inside its loss, so it learns token ``t -> t + 1``
    on the same ``block_size`` inputs; the block's last token is no target here (it is the next
    block's first input), ``block_size - 1`` targets a block instead of ``block_size``.

    ``eos_id`` (``document_attention=True``) adds ``position_ids`` that restart at 0 after each
    ``eos_id`` (:func:`~lightning_order.models.attention.document_positions`); the ``"hf"`` form then
    has no ``attention_mask``, because ``transformers`` keeps packed documents apart by their
    ``position_ids`` only when no mask is given (``DataCollatorWithFlattening``'s form).
    """
    inputs = blocks[..., :-1]
    if eos_id is not None:
        return document_batch(blocks, batch_format, eos_id)
    if batch_format == "hf":
        return {"input_ids": inputs, "labels": inputs.clone(), "attention_mask": torch.ones_like(inputs)}
    return {"input_ids": inputs, "labels": blocks[..., 1:]}


def document_batch(blocks: torch.Tensor, batch_format: str, eos_id: int) -> dict[str, torch.Tensor]:
    """:func:`block_batch` of ``document_attention=True``: the labels of ``batch_format`` and per-document ``position_ids``."""
    inputs = blocks[..., :-1]
    labels = inputs.clone() if batch_format == "hf" else blocks[..., 1:]
    return {"input_ids": inputs, "labels": labels, "position_ids": document_positions(inputs, eos_id)}


def choose_batch_format(requested: str, module: Any) -> dict[str, Any]:
    """The batch format for ``module``, and why: ``{"format", "requested", "model"}`` (plain data, for the ledger).

    ``"auto"`` is ``"hf"`` when ``module`` is or wraps a ``transformers`` causal LM (it shifts the
    labels itself; :func:`~lightning_order.models.hf.hf_causal_lm`), else ``"shifted"``.
    """
    model = hf_causal_lm(module)
    chosen = requested if requested != "auto" else ("hf" if model is not None else "shifted")
    return {
        "format": chosen,
        "requested": requested,
        "model": None if model is None else type(model).__name__,
    }


class BlockDataset(Dataset[dict[str, torch.Tensor]]):
    """Packed blocks as :func:`block_batch` items (long tensors): by default ``{"input_ids": block[:-1], "labels": block[1:]}``.

    ``blocks`` may be memory-mapped and ``index`` chooses this rank's rows, so a rank holds only
    what a batch reads. ``__getitems__`` reads a whole batch with one numpy fancy index.

    Index ``len(dataset)`` (one past the end) is the padding of an evaluation share
    (:mod:`~lightning_order.data.engine.eval_shares`): the first block with every label ``-100``,
    which the loss ignores, so a rank with a shorter share runs as many steps and scores nothing more.
    """

    def __init__(
        self,
        blocks: np.ndarray,
        index: np.ndarray | None = None,
        batch_format: str = "shifted",
        eos_id: int | None = None,
    ) -> None:
        self.blocks = blocks
        self.index = index
        self.batch_format = batch_format
        self.eos_id = eos_id  # set: per-document position_ids (document_attention=True)

    def __len__(self) -> int:
        return len(self.blocks) if self.index is None else len(self.index)

    def _rows(self, indices: Any) -> np.ndarray:
        rows = np.asarray(indices, dtype=np.int64)
        return rows if self.index is None else self.index[rows]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {key: value[0] for key, value in self.__getitems__([index]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        wanted = np.asarray(indices, dtype=np.int64)
        padding = wanted == len(self)  # an evaluation share's padding: a block with no target
        blocks = torch.from_numpy(
            np.asarray(self.blocks[self._rows(np.where(padding, 0, wanted))], dtype=np.int64)
        )
        batch = block_batch(blocks, self.batch_format, self.eos_id)
        if padding.any():
            labels = batch["labels"].clone()  # a view of the blocks, which the inputs share
            labels[torch.from_numpy(padding)] = IGNORE_INDEX
            batch["labels"] = labels
        return batch


def collate_blocks(items: Any) -> dict[str, torch.Tensor]:
    """A batch from ``BlockDataset.__getitems__`` (already stacked) or from a list of items."""
    if isinstance(items, dict):
        return items
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


@document_arguments(LMConfig)
class OrderedLMDataModule(OrderedDataModuleBase):
    """A LightningDataModule that prepares causal LM data in the order of :data:`~lightning_order.LM_PIPELINE`.

    ``load → clean → dedup → split → build_vocab → encode → pack`` run once in ``prepare_data``;
    ``shard`` runs in ``setup`` on every rank. Reading :attr:`dims` prepares the data (or reads
    the cache), so the model is built from it: ``OrderedCausalLM(**dm.dims)``.

    Examples:
        >>> dm = OrderedLMDataModule(max_documents=500, vocab_size=1024, block_size=64)  # doctest: +SKIP
        >>> model = OrderedCausalLM(**dm.dims)  # doctest: +SKIP
    """

    pipeline_name: ClassVar[str] = NAME
    #: On object storage, the block shards are fetched when a rank reads them, the documents when
    #: :meth:`documents` is called; the rest is copied to the local mirror at ``setup``.
    lazy_files: ClassVar[tuple[str, ...]] = ("*/blocks/*.npy", "*/documents/*")
    config: LMConfig

    @config_constructor(LMConfig)  # the positional order is the fields' (data/engine/arguments.py)
    def __init__(self, arguments: dict[str, Any]) -> None:
        """Takes :class:`~lightning_order.data.lm.config.LMConfig`'s fields as keywords."""
        self.configure(arguments, overrides=override_identity(type(self), OrderedLMDataModule, ("clean",)))
        if self.config.sources is not None:  # plain data in checkpoints, which load with weights_only=True
            self.hparams["sources"] = [dataclasses.asdict(s) for s in self.config.source_list]
        self._doc_hashes: dict[str, np.ndarray] = {}
        self._batch_format: dict[str, Any] | None = None
        self._hf_tokenizer: tuple[Any, Any] | None = None  # (the tokenizer it wraps, the wrapper)
        if self.config.tokenizer_source is not None and self.config.tokenizer_source.kind == "object":
            # A checkpoint holds the hyperparameters and is read with weights_only=True: the object
            # is named by its content hash there, never pickled.
            self.hparams["tokenizer"] = (
                f"{self.config.tokenizer_source.name} xxh3:{self.config.tokenizer_source.digest}"
            )

    def clean(self, text: str) -> str:
        """Step 2: cleans one document. Override to change the cleaning (``super().clean(text)`` first, usually).

        The default (:func:`~lightning_order.data.lm.documents.clean_document`): Unicode NFKC, line
        ends made ``\\n``, control characters dropped, the end-of-text token removed, trailing
        spaces stripped, runs of blank lines made one; line structure and indentation kept.
        Documents empty afterwards are dropped (and counted). An override joins the cache key (its
        source's hash) and runs in the worker processes, so it must be picklable.
        """
        return clean_document(text, self.config.eos_token)

    def _hooks(self) -> dict[str, Any]:
        if "clean" not in self.config.overrides:
            return {}  # the default cleaning runs in the workers without this object
        clone = copy.copy(self)
        clone.__dict__.update(
            trainer=None, _ledger=None, _tokenizer=None, _hf_tokenizer=None, _train=None, _val=None
        )
        return {"clean": clone.clean}

    # -- what the model and the checks read ------------------------------------------------
    @property
    def eos_token_id(self) -> int:
        """The id of the end-of-text token (``eos_token``) in the tokenizer."""
        return int(self._manifest().info["eos_id"])

    @property
    def eos_token(self) -> str:
        """The end-of-text token (``eos_token``, default ``<|endoftext|>``)."""
        return str(self._manifest().info.get("eos_token", self.config.eos_token))

    @property
    def bos_token(self) -> str | None:
        """The token every document starts with in the blocks (``None``: none), as ``build_vocab`` decided."""
        found = self._manifest().info.get("bos_token")
        return None if found is None else str(found)

    @property
    def hf_tokenizer(self) -> Any:
        """The tokenizer in use as a ``transformers.PreTrainedTokenizerFast``, its special tokens set.

        eos, bos (as the blocks start a document), pad (the supplied one, else eos) and unk (if
        any): ``hf_tokenizer(prompt).input_ids`` are the tokens the blocks hold after a document
        boundary; a supplied tokenizer's ``chat_template`` and ``model_max_length`` kept. Built on
        first use from ``dm.tokenizer`` (a copy); needs ``transformers``.

        Raises:
            ImportError: ``transformers`` is not installed.
        """
        tokenizer = self.tokenizer
        if self._hf_tokenizer is None or self._hf_tokenizer[0] is not tokenizer:
            self._hf_tokenizer = (
                tokenizer,
                hf_tokenizer_of(tokenizer, self._special_tokens(), self._hf_settings()),
            )
        return self._hf_tokenizer[1]

    def _special_tokens(self) -> dict[str, str]:
        return dict(self._manifest().info.get("special_tokens") or {"eos_token": self.eos_token})

    def _hf_settings(self) -> dict[str, Any]:
        # read from the supplied tokenizer, not the cache: they do not shape the data (nor its key)
        source = self.config.tokenizer_source
        return dict(source.settings) if source is not None else {}

    def state_dict(self) -> dict[str, Any]:
        """The train position (see the base class); also writes the tokenizer beside the checkpoints.

        Lightning asks for it when it saves a checkpoint: on global rank zero the tokenizer is
        written with ``save_pretrained`` into ``tokenizer/`` in the checkpoint callback's
        ``dirpath`` (:mod:`~lightning_order.data.lm.hf_tokenizer`), once per content.
        """
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            save_beside_checkpoints(trainer, self.tokenizer, self._special_tokens(), self._hf_settings())
        return super().state_dict()

    def documents(self, split: str) -> Sequence[str]:
        """The cleaned, deduplicated documents of ``split`` (``"train"`` or ``"val"``), in canonical order.

        A read-only sequence (``len``, indexing, iteration) read from the cache's Arrow files on
        demand: a corpus larger than memory is never loaded whole.
        """
        counts = (self._manifest().info.get("documents") or {}).get(split)
        if counts is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        path = self._ensure_prepared()
        if self.remote_cache is not None:  # documents stay on the store until asked for
            ledger = self._manifest()
            prefix = f"{split}/documents/"
            self.remote_cache.sync(ledger, [n for n in ledger.info.get("files") or {} if n.startswith(prefix)])
        return read_documents(path, split, counts)

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

    # -- setup and loaders (the template: OrderedDataModuleBase) ---------------------------
    def read_prepared(self, path: Path, ledger: StepLedger) -> DataState:
        arrays = read_blocks(path, self.remote_files(ledger))
        self._doc_hashes = {"train": arrays["train_doc_hashes"], "val": arrays["val_doc_hashes"]}
        pack = ledger.latest("pack")  # a mixture's record: shard draws the train blocks by weight from it
        mixture = pack.stats.get("mixture") if pack is not None else None
        extra = {"mixture": mixture} if mixture else {}
        return DataState(parts={"train": arrays["train"], "val": arrays["val"]}, form="packed", extra=extra)

    def assign(self, state: DataState, ledger: StepLedger) -> None:
        self._train, self._val = state.parts["train"], state.parts["val"]

    def setup(self, stage: str | None = None) -> None:
        """Loads the verified cache, runs ``shard`` on this rank, and chooses the batch format.

        ``batch_format="auto"`` is decided from the trainer's module now (``"hf"`` for a
        ``transformers`` causal LM, else ``"shifted"``); the choice is recorded in the ledger's
        ``info["batch_format"]`` (``{"format", "requested", "model"}``), ``document_attention`` in
        ``info["document_attention"]``.
        """
        super().setup(stage)
        trainer = getattr(self, "trainer", None)
        module = getattr(trainer, "lightning_module", None) if trainer is not None else None
        self._batch_format = choose_batch_format(self.config.batch_format, module)
        self.ledger.info["batch_format"] = dict(self._batch_format)
        self.ledger.info["document_attention"] = bool(self.config.document_attention)
        self.ledger.info["shard_validation"] = bool(self.config.shard_validation)

    @property
    def batch_format(self) -> str:
        """The batches' format, ``"shifted"`` or ``"hf"`` (``"auto"`` is decided at ``setup``; ``"shifted"`` before it)."""
        if self._batch_format is not None:
            return str(self._batch_format["format"])
        return "shifted" if self.config.batch_format == "auto" else str(self.config.batch_format)

    def to_dataset(self, data: Any) -> BlockDataset:
        eos_id = self.eos_token_id if self.config.document_attention else None
        if isinstance(data, BlockView):
            return BlockDataset(data.blocks, data.rows(), self.batch_format, eos_id)
        return BlockDataset(data, batch_format=self.batch_format, eos_id=eos_id)

    def blocks(self, split: str) -> np.ndarray:
        """The packed blocks (``n × (block_size + 1)`` int32): this rank's for ``"train"`` (those it reads in the first epoch), all for ``"val"``.

        Raises:
            ValueError: an unknown split, or ``setup`` has not run.
        """
        found = {"train": self._train, "val": self._val}.get(split)
        if found is None:
            raise ValueError(f"blocks(split) takes 'train' or 'val' after setup(), got {split!r}")
        return np.asarray(found)

    def collate_fn(self) -> Any:
        return collate_blocks

    def val_dataloader(self) -> DataLoader:
        """This data-parallel rank's contiguous share of the validation blocks, none scored twice.

        Shares differ by at most one block; a shorter one ends with a padding block whose labels
        are all ``-100`` (ignored by the loss), so every rank runs as many steps
        (:mod:`~lightning_order.data.engine.eval_shares`). ``OrderedCausalLM`` reduces ``val_loss``
        as a sum and a count, so it equals the 1-rank value. ``shard_validation=False``: every
        rank reads the whole split.
        """
        return self._eval_loader()

    def test_dataloader(self) -> DataLoader:
        """The validation split again (held-out data), shared out like :meth:`val_dataloader`."""
        return self._eval_loader()

    def _eval_loader(self) -> DataLoader:
        if not self.config.shard_validation:
            return self._loader(self._val, False)
        data = None if self._val is None else self.to_dataset(self._val)
        # The data-parallel size and rank the shard step split the train blocks by (setup).
        parts, part = int(self.shard_info.get("world_size", 1)), int(self.shard_info.get("rank", 0))
        return make_share_loader(
            data, self.batch_size, self.num_workers, self.collate_fn(), parts, part, pad=True
        )

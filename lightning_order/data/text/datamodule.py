"""``OrderedDataModule``: the thin stateful shell that runs the registered data steps in order.

The steps are plain functions registered in :mod:`lightning_order.data.engine.runner`; this class checks
the order (a dry run of the same runner, judged by the pipeline), runs the steps before ``shard``
in ``prepare_data`` (one process, under a file lock, into a cache folder named by the pipeline
fingerprint, assigning no state) and the per-rank ones in ``setup``, and serves the loaders.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from lightning_order import compat as pl
from lightning_order.data.engine.datamodule import PreparedCache
from lightning_order.data.engine.loaders import make_loader
from lightning_order.data.engine.runner import StepContext, run_steps, split_phases
from lightning_order.data.text import prepare as _prepare
from lightning_order.data.text.artefacts import read_state
from lightning_order.data.text.batches import BATCH_KEYS, Collate
from lightning_order.data.text.cleaning import CleanRows, clean_batch
from lightning_order.data.text.config import (
    CODE_VERSION,
    DataConfig,
    InputHash,
    TokenizerKind,
    override_identity,
)
from lightning_order.data.text.features import ENGINEERED_FEATURES, engineer_batch
from lightning_order.data.text.steps import DATA_STEPS, STEPS
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline

__all__ = ["CODE_VERSION", "DATA_STEPS", "OrderedDataModule"]

#: The config fields kept as attributes of the same name (subclasses' row steps read them).
_ATTRIBUTES = ("dataset", "data_files", "text_column", "label_column", "numeric_columns", "group_column")
_ATTRIBUTES += ("val_fraction", "seed", "lowercase", "demo_size", "demo_sources", "demo_seed")
_ATTRIBUTES += ("dataset_config", "load_split", "num_proc")


class OrderedDataModule(PreparedCache, pl.LightningDataModule):
    """A LightningDataModule that prepares text classification data in the mandated order.

    Subclass it and override :meth:`clean` or :meth:`engineer_features` (row-wise, stateless),
    or use it as is from a YAML config. Reading :attr:`dims` (or ``vocab_size``,
    ``num_features``, ``num_classes``, ``max_length``) prepares the data, or reads the cached
    manifest, so a model can be built from the data's dimensions right after construction.

    Example:
        >>> dm = OrderedDataModule(demo_size=2000, vocab_size=500)  # doctest: +SKIP
        >>> model = MyModel(**dm.dims)  # doctest: +SKIP

    Args:
        dataset: anything :func:`datasets.load_dataset` takes (a hub name, or ``"csv"``,
            ``"json"``, ``"parquet"``, ``"text"`` with ``data_files``); ``None`` for the built-in
            demo corpus.
        data_files: files for ``dataset`` (a path, a list, or a dict of split -> paths).
        text_column: the column holding the text.
        label_column: the column holding the class label.
        numeric_columns: numeric columns to standardise and feed as features. Empty with the
            demo corpus means the demo's own numeric columns.
        group_column: split by this column's value instead of the cleaned text (rows of a group
            stay together).
        val_fraction: the validation share, in (0, 1).
        seed: seeds the split and the train shuffling (the demo corpus has ``demo_seed``).
        vocab_size: the tokenizer's target vocabulary size, special tokens included.
        tokenizer: the tokenizer to train: ``"wordpiece"`` or ``"bpe"``.
        max_length: token ids are padded/truncated to this length.
        batch_size: rows per batch in the dataloaders.
        num_workers: dataloader worker processes.
        num_proc: processes for the row-wise steps that run through ``Dataset.map`` (a
            user's own ``clean`` or ``engineer_features``, on at least 20 000 rows); ``None``
            (the default): every available CPU. The default steps run vectorised in Arrow and
            the tokenizer uses its own threads.
        cache_dir: the cache root; default ``$LIGHTNING_ORDER_CACHE`` or ``~/.cache/lightning_order``.
        demo_size: rows of the demo corpus (about 190 bytes of text each).
        order: the data steps to run, in order (a permutation or subset of ``load, clean,
            engineer_features, split, fit_features, build_vocab, encode, shard``); ``None`` for
            the mandated order.
        enforce: refuse an order that breaks the pipeline's rules (``OrderError`` at
            construction); ``False`` runs it as asked and records what really happened.
        dataset_config: the configuration name passed to ``load_dataset`` (its ``name``).
        load_split: the split of ``load_dataset`` to read (it is re-split by key).
        lowercase: lower-case the text when cleaning.
        demo_sources: the demo corpus comes in this many contiguous blocks with different
            numeric scales.
        demo_seed: the demo corpus generator's seed (``seed`` only moves the split).
        shuffle: shuffle the train shard each epoch (seeded; Lightning sets the epoch).
        pipeline: the pipeline whose data steps run and which judges ``order``;
            ``None`` for :data:`~lightning_order.STANDARD_PIPELINE`. Its data steps are the ones
            registered in :data:`~lightning_order.data.engine.runner.STEPS` (see
            :mod:`lightning_order.data.engine.runner` to add one).
        input_hash: how the input files (``data_files``, globs and folders expanded) enter the
            cache key: ``"content"`` (default) hashes their bytes with xxh3, so any change is
            seen; ``"size_mtime"`` uses size and modification time only (for very large inputs;
            a rewrite keeping both is then not seen).
    """

    #: Names of the columns :meth:`engineer_features` adds (override with your own features).
    engineered_features: tuple[str, ...] = ENGINEERED_FEATURES

    def __init__(
        self,
        dataset: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_column: str = "text",
        label_column: str = "label",
        numeric_columns: Sequence[str] = (),
        group_column: str | None = None,
        val_fraction: float = 0.1,
        seed: int = 0,
        vocab_size: int = 8000,
        tokenizer: TokenizerKind = "wordpiece",
        max_length: int = 128,
        batch_size: int = 32,
        num_workers: int = 0,
        num_proc: int | None = None,
        cache_dir: str | None = None,
        demo_size: int = 20000,
        order: Sequence[str] | None = None,
        enforce: bool = True,
        dataset_config: str | None = None,
        load_split: str = "train",
        lowercase: bool = True,
        demo_sources: int = 1,
        demo_seed: int = 0,
        shuffle: bool = True,
        pipeline: Pipeline | None = None,
        input_hash: InputHash = "content",
    ) -> None:
        super().__init__()
        # logger=False: the requested vocab_size (a target) would clash with the model's logged
        # vocab_size (the size actually built) when Lightning merges the two sets of hparams.
        self.save_hyperparameters(logger=False, ignore=["pipeline"])
        self.config = DataConfig.from_arguments(
            locals(),
            engineered_features=self.engineered_features,
            overrides=override_identity(type(self), OrderedDataModule, ("clean", "engineer_features")),
        )
        for name in _ATTRIBUTES:
            setattr(self, name, getattr(self.config, name))
        self.target_vocab_size, self.tokenizer_kind = self.config.vocab_size, self.config.tokenizer
        self.batch_size, self.num_workers, self.cache_dir = int(batch_size), int(num_workers), cache_dir
        self.shuffle, self.enforce = bool(shuffle), bool(enforce)
        self.pipeline = STANDARD_PIPELINE if pipeline is None else pipeline
        self.order: tuple[str, ...] = _prepare.order_of(self.config, order, self.enforce, self.pipeline)
        #: The pipeline fingerprint: the hash of everything that shapes the prepared data.
        self.cache_key: str = _prepare.cache_key(self.config, self.order)
        self._ledger: StepLedger | None = None
        self._tokenizer: Tokenizer | None = None
        self._train: datasets.Dataset | None = None  # this rank's shard, after setup
        self._val: datasets.Dataset | None = None
        self._statistics: dict[str, Any] | None = None
        self._collate = Collate()
        self._setup_key: tuple[Any, ...] | None = None
        self._verified: str | None = None  # the cache key whose files this instance verified
        self.shard_info: dict[str, int] = {}

    def clean(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Step 2: cleans a batch (row-wise). Override to change the cleaning.

        The default: unicode NFKC, HTML entities and tags removed, stray ``##`` markers dropped,
        repeated punctuation and whitespace collapsed, lower-cased (``lowercase``). Rows whose
        text is empty afterwards are dropped by the caller.
        """
        return clean_batch(batch, self.text_column, self.lowercase)

    def engineer_features(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """Step 3: adds stateless per-row features (the :attr:`engineered_features` columns).

        Override it together with :attr:`engineered_features`; it must look at one row at a
        time (anything learned from many rows belongs after the split).
        """
        return engineer_batch(batch, self.text_column, self.numeric_columns)

    @property
    def feature_names(self) -> list[str]:
        """The feature vector's columns: the numeric columns, then the engineered ones."""
        return _prepare.feature_names(self.config, self.order)

    def _context(self, work: Path | None = None, world: int = 1, rank: int = 0) -> StepContext:
        # The hooks run in num_proc workers: a shallow copy without trainer or data pickles cheaply.
        clone = copy.copy(self)
        clone.__dict__.update(trainer=None, _ledger=None, _tokenizer=None, _train=None, _val=None)
        # Only overridden row steps are hooks: the default ones run vectorised over Arrow.
        hooks: dict[str, Any] = {}
        if "clean" in self.config.overrides:
            hooks["clean"] = CleanRows(clone.clean, self.text_column)
        if "engineer_features" in self.config.overrides:
            hooks["engineer_features"] = clone.engineer_features
        ctx = StepContext(self.config, work=work, hooks=hooks, rank=rank, world_size=world)
        return replace(ctx, feature_names=tuple(self.feature_names))

    def _prepare_into(self, folder: Path) -> None:
        _prepare.prepare_into(folder, self.config, self.order, self._context().hooks)

    @property
    def num_features(self) -> int:
        """The length of the ``features`` vector."""
        return self.dims["num_features"]

    @property
    def num_classes(self) -> int:
        """The number of classes (labels seen in train)."""
        return self.dims["num_classes"]

    @property
    def max_length(self) -> int:
        """The padded sequence length."""
        return self.config.max_length

    @property
    def statistics(self) -> dict[str, Any]:
        """The feature statistics (``columns``, ``mean``, ``std``, ``count``) the dataloaders use."""
        if self._statistics is not None:
            return dict(self._statistics)
        return json.loads((self._ensure_prepared() / "statistics.json").read_text())

    def data_fingerprints(self) -> dict[str, str]:
        """``{"manifest", "split", "statistics", "vocab"}``: what every rank and a resumed run must share."""
        fps = dict(self._manifest().info["data_fingerprints"])
        fit = self._manifest().latest("fit_features")
        if fit is not None:  # after setup, statistics fitted on this rank's shard are this rank's
            fps["statistics"] = fit.output
        return {k: str(v) for k, v in fps.items()}

    def key_hashes(self, split: str) -> np.ndarray | None:
        """The ``key_hash`` column (int64) of this rank's train shard or of the validation split.

        Read from Arrow without per-row Python; ``None`` before ``setup`` or for an unknown split.
        """
        data = {"train": self._train, "val": self._val}.get(split)
        if data is None:
            return None
        return data.with_format("arrow")["key_hash"].to_numpy().astype(np.int64, copy=False)

    def setup(self, stage: str | None = None) -> None:
        """Loads the cache on this rank and runs the per-rank steps (``shard``: step 8).

        Train: an equal-length contiguous shard per rank (see :mod:`lightning_order.data.text.shard`).
        Validation: the whole split on every rank, so every rank's validation metrics are exact
        and equal (no padding duplicates from a distributed sampler).
        """
        trainer = getattr(self, "trainer", None)
        world, rank = (int(trainer.world_size), int(trainer.global_rank)) if trainer else (1, 0)
        key = (self.cache_key, world, rank)
        if self._setup_key == key:
            return
        path = self._ensure_prepared()
        ledger = StepLedger.load(path)
        ledger.rank = rank
        state = read_state(path, ledger)
        state = run_steps(
            split_phases(self.order, STEPS)[1], STEPS, self._context(None, world, rank), state, ledger
        )
        stats = state.statistics
        # Statistics fitted after encode (per shard, a wrong order) are applied when batching.
        late = stats is not None and not state.standardised
        self._collate = Collate(stats["mean"], stats["std"]) if late else Collate()
        self._statistics = dict(stats) if stats is not None else None
        self._train = state.parts["train"].with_format("torch", columns=list(BATCH_KEYS))
        self._val = state.parts["val"].with_format("torch", columns=list(BATCH_KEYS))
        self._ledger = ledger
        shard = ledger.latest("shard").stats
        self.shard_info = {
            "rank": rank,
            "world_size": world,
            "length": shard["length"],
            "dropped": shard["dropped"],
        }
        self._setup_key = key

    def _loader(self, data: datasets.Dataset | None, shuffle: bool) -> DataLoader:
        return make_loader(data, self.batch_size, shuffle, self.seed, self.num_workers, self._collate)

    def train_dataloader(self) -> DataLoader:
        """Batches of this rank's train shard (``input_ids``, ``attention_mask``, ``features``, ``labels``)."""
        return self._loader(self._train, self.shuffle)

    def val_dataloader(self) -> DataLoader:
        """Batches of the whole validation split (the same on every rank)."""
        return self._loader(self._val, False)

    def test_dataloader(self) -> DataLoader:
        """The validation split again (this module splits train/validation only): held-out rows."""
        return self._loader(self._val, False)

    def predict_dataloader(self) -> DataLoader:
        """The validation split, in order (see :meth:`test_dataloader`)."""
        return self._loader(self._val, False)

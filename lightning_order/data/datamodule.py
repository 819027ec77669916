"""``OrderedDataModule``: the data steps of DESIGN.md §1, run in the mandated order and recorded.

The step maths live in the sibling modules as plain functions; this class is the stateful shell
that runs them in order, records each in a :class:`~lightning_order.ledger.StepLedger`, and keeps
Lightning's contract: ``prepare_data`` (one process, under a file lock) runs steps 1-7 and writes
a cache folder named by the pipeline fingerprint, assigning no state; ``setup`` (every rank) loads
that cache and takes this rank's shard (step 8).

A different ``order`` is refused at construction (:class:`~lightning_order.errors.OrderError`,
with the real rule codes) unless ``enforce=False``; then the steps really run in that order and
the ledger records what happened, which is how the order errors are reproduced for real.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, DistributedSampler
from torch.utils.data._utils.collate import default_collate

from lightning_order import _compat as pl
from lightning_order.data import cache as _cache
from lightning_order.data.cleaning import clean_batch
from lightning_order.data.demo import DEMO_NUMERIC_COLUMNS, make_demo_corpus
from lightning_order.data.encode import Encoder, encoded_features
from lightning_order.data.features import ENGINEERED_FEATURES, engineer_batch, fit_statistics
from lightning_order.data.shard import shard_dataset
from lightning_order.data.split import is_val
from lightning_order.data.vocab import (
    TOKENIZERS,
    check_vocab_size,
    text_alphabet,
    text_batches,
    train_tokenizer,
)
from lightning_order.errors import DataError, OrderError
from lightning_order.ledger import StepLedger, fingerprint
from lightning_order.order import STANDARD_PIPELINE

__all__ = ["CODE_VERSION", "DATA_STEPS", "OrderedDataModule"]

#: The data steps, in the mandated order (read from :data:`STANDARD_PIPELINE`).
DATA_STEPS: tuple[str, ...] = tuple(
    STANDARD_PIPELINE.subset(
        ["load", "clean", "engineer_features", "split", "fit_features", "build_vocab", "encode", "shard"]
    )
)
#: Bump when a step's output changes for the same config, so old caches are not reused.
CODE_VERSION = "2"
_REQUIRED_STEPS = ("load", "split", "build_vocab", "encode", "shard")
_BATCH_KEYS = ("input_ids", "attention_mask", "features", "labels")


@dataclass
class _State:
    """What the pipeline holds between steps (whole data before the split, parts after)."""

    data: datasets.Dataset | None = None
    data_fp: str = ""
    data_step: str = ""
    parts: dict[str, datasets.Dataset] = field(default_factory=dict)
    part_fps: dict[str, str] = field(default_factory=dict)
    statistics: dict[str, Any] | None = None
    tokenizer: Tokenizer | None = None
    encoded: dict[str, datasets.Dataset] = field(default_factory=dict)
    label_names: list[Any] = field(default_factory=list)


class _Collate:
    """Stacks torch-formatted rows into the batch contract; standardises features when asked."""

    def __init__(self, mean: Sequence[float] | None = None, std: Sequence[float] | None = None) -> None:
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32)

    def __call__(self, rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        batch = default_collate(rows)
        out = {
            "input_ids": batch["input_ids"].long(),
            "attention_mask": batch["attention_mask"].long(),
            "features": batch["features"].float(),
            "labels": batch["labels"].long(),
        }
        if self.mean is not None and self.std is not None:
            out["features"] = (out["features"] - self.mean) / self.std
        return out


class OrderedDataModule(pl.LightningDataModule):
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
        seed: seeds the split (and the demo corpus).
        vocab_size: the tokenizer's target vocabulary size, special tokens included.
        tokenizer: ``"wordpiece"`` or ``"bpe"``.
        max_length: token ids are padded/truncated to this length.
        batch_size: rows per batch in the dataloaders.
        num_workers: dataloader worker processes.
        num_proc: processes for the batched ``Dataset.map`` steps of preparation.
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
        tokenizer: str = "wordpiece",
        max_length: int = 128,
        batch_size: int = 32,
        num_workers: int = 0,
        num_proc: int = 1,
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
    ) -> None:
        super().__init__()
        # logger=False: the requested vocab_size (a target) would clash with the model's logged
        # vocab_size (the size actually built) when Lightning merges the two sets of hparams.
        self.save_hyperparameters(logger=False)
        if not isinstance(val_fraction, (int, float)) or not 0.0 < float(val_fraction) < 1.0:
            raise DataError(
                f"val_fraction must be in (0, 1), got {val_fraction!r}; e.g. val_fraction=0.1",
                step="split",
            )
        check_vocab_size(vocab_size)
        if tokenizer not in TOKENIZERS:
            raise DataError(
                f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}", step="build_vocab"
            )
        if not isinstance(max_length, int) or max_length < 1:
            raise DataError(f"max_length must be a positive int, got {max_length!r}", step="encode")
        self.dataset = dataset
        self.data_files = data_files
        self.text_column = text_column
        self.label_column = label_column
        if dataset is None and not numeric_columns:
            numeric_columns = DEMO_NUMERIC_COLUMNS
        self.numeric_columns = tuple(numeric_columns)
        self.group_column = group_column
        self.val_fraction = float(val_fraction)
        self.seed = int(seed)
        self.target_vocab_size = int(vocab_size)
        self.tokenizer_kind = tokenizer
        self._max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.num_proc = int(num_proc)
        self.cache_dir = cache_dir
        self.demo_size = int(demo_size)
        self.demo_sources = int(demo_sources)
        self.demo_seed = int(demo_seed)
        self.dataset_config = dataset_config
        self.load_split = load_split
        self.lowercase = bool(lowercase)
        self.shuffle = bool(shuffle)
        self.enforce = bool(enforce)
        self.order: tuple[str, ...] = self._validate_order(order)
        self._cache_key: str | None = None
        self._ledger: StepLedger | None = None
        self._tokenizer: Tokenizer | None = None
        self._train: datasets.Dataset | None = None
        self._val: datasets.Dataset | None = None
        self._collate = _Collate()
        self._setup_key: tuple[Any, ...] | None = None
        self.shard_info: dict[str, int] = {}

    # -- the order ---------------------------------------------------------------------------
    def _validate_order(self, order: Sequence[str] | None) -> tuple[str, ...]:
        if order is None:
            return DATA_STEPS
        if isinstance(order, str):
            order = [s.strip() for s in order.replace("->", ",").split(",") if s.strip()]
        steps = tuple(order)
        unknown = [s for s in steps if s not in DATA_STEPS]
        if unknown:
            raise ValueError(
                f"order names unknown step(s) {unknown}; the data steps are {', '.join(DATA_STEPS)}"
            )
        if len(set(steps)) != len(steps):
            raise ValueError(f"order names a step twice: {list(steps)}")
        if steps == DATA_STEPS:
            return steps
        violations = STANDARD_PIPELINE.check(_planned_ledger(steps))
        if violations and self.enforce:
            raise OrderError(
                violations,
                header=f"OrderedDataModule(order={list(steps)}) breaks the mandated order "
                f"({' -> '.join(DATA_STEPS)}); pass enforce=False to run it anyway (for experiments):",
            )
        _check_runnable(steps)
        return steps

    @property
    def deferred_fit(self) -> bool:
        """Whether statistics are fitted per shard in ``setup`` (``shard`` ordered before ``fit_features``)."""
        return "fit_features" in self.order and self.order.index("shard") < self.order.index("fit_features")

    # -- the cache ---------------------------------------------------------------------------
    @property
    def cache_root(self) -> Path:
        """The cache root folder (``cache_dir`` or the default)."""
        return Path(self.cache_dir).expanduser() if self.cache_dir else _cache.default_cache_dir()

    @property
    def cache_key(self) -> str:
        """The pipeline fingerprint: the hash of everything that shapes the prepared data."""
        if self._cache_key is None:
            self._cache_key = fingerprint("lightning_order.data", self._config_identity())
        return self._cache_key

    @property
    def cache_path(self) -> Path:
        """The cache folder of this configuration (``<cache_root>/<cache_key>``)."""
        return self.cache_root / self.cache_key

    def _config_identity(self) -> dict[str, Any]:
        identity: dict[str, Any] = {
            "code_version": CODE_VERSION,
            "dataset": self.dataset,
            "dataset_config": self.dataset_config,
            "load_split": self.load_split,
            "data_files": _files_identity(self.data_files),
            "text_column": self.text_column,
            "label_column": self.label_column,
            "numeric_columns": list(self.numeric_columns),
            "group_column": self.group_column,
            "val_fraction": self.val_fraction,
            "seed": self.seed,
            "vocab_size": self.target_vocab_size,
            "tokenizer": self.tokenizer_kind,
            "max_length": self._max_length,
            "order": list(self.order),
            "lowercase": self.lowercase,
            "engineered_features": list(self.engineered_features),
            "overrides": self._override_identity(),
        }
        if self.dataset is None:
            identity["demo"] = {"size": self.demo_size, "sources": self.demo_sources, "seed": self.demo_seed}
        return identity

    def _override_identity(self) -> dict[str, str]:
        # A subclass that overrides a row-wise step changes the data: its source joins the key.
        out = {}
        for name in ("clean", "engineer_features"):
            method = getattr(type(self), name)
            if method is not getattr(OrderedDataModule, name):
                try:
                    source = inspect.getsource(method)
                except (OSError, TypeError):
                    source = f"{type(self).__module__}.{type(self).__qualname__}"
                out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
        return out

    # -- overridable row-wise steps ----------------------------------------------------------
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
        engineered = list(self.engineered_features) if "engineer_features" in self.order else []
        return [*self.numeric_columns, *engineered]

    # -- Lightning: prepare_data -------------------------------------------------------------
    def prepare_data(self) -> None:
        """Runs steps 1-7 once and publishes the cache folder (no state is assigned).

        Under a file lock: the first process prepares, the others wait and then find the
        finished cache. A complete cache of the same configuration is reused at once.
        """
        root, key = self.cache_root, self.cache_key
        final = root / key
        if _cache.is_complete(final, key):
            return
        with _cache.cache_lock(root, key):
            if _cache.is_complete(final, key):
                return
            _cache.remove_stale(root, key)
            tmp = _cache.new_temp_dir(root, key)
            try:
                self._prepare_into(tmp)
                _cache.publish(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

    def _prepare_into(self, folder: Path) -> None:
        global _PIPELINE_RUNS
        _PIPELINE_RUNS += 1
        work = folder / "work"
        work.mkdir()
        ledger = StepLedger(info={"cache_key": self.cache_key})
        state = _State()
        for step in self._prepare_steps():
            self._run_step(step, state, ledger, work)
        for name, part in state.encoded.items():
            part.save_to_disk(str(folder / name))
        state.tokenizer.save(str(folder / "tokenizer.json"))
        (folder / "statistics.json").write_text(json.dumps(state.statistics, indent=2, sort_keys=True))
        fps = {
            "manifest": ledger.fingerprint,
            "split": _output(ledger, "split"),
            "statistics": _output(ledger, "fit_features"),
            "vocab": _output(ledger, "build_vocab"),
        }
        ledger.info.update(
            {
                "dims": {
                    "vocab_size": state.tokenizer.get_vocab_size(),
                    "num_features": len(self.feature_names),
                    "num_classes": len(state.label_names),
                    "max_length": self._max_length,
                },
                "feature_names": self.feature_names,
                "label_names": state.label_names,
                "data_fingerprints": fps,
                "order": list(self.order),
                "deferred_fit": self.deferred_fit,
                "config": self._config_identity(),
            }
        )
        shutil.rmtree(work, ignore_errors=True)
        ledger.save(folder)  # last: a folder with a manifest is a finished folder

    def _prepare_steps(self) -> list[str]:
        skip = {"shard"} | ({"fit_features"} if self.deferred_fit else set())
        return [s for s in self.order if s not in skip]

    def _run_step(self, step: str, state: _State, ledger: StepLedger, work: Path) -> None:
        """Runs one data step of ``prepare_data`` and records it (a seam for tests and subclasses)."""
        getattr(self, f"_step_{step}")(state, ledger, work)

    # -- the steps ---------------------------------------------------------------------------
    def _for_workers(self) -> OrderedDataModule:
        """A shallow copy without the trainer or loaded data, cheap to pickle for ``num_proc`` workers."""
        clone = copy.copy(self)
        clone.__dict__.update(trainer=None, _ledger=None, _tokenizer=None, _train=None, _val=None)
        return clone

    def _map_kwargs(self, fp: str) -> dict[str, Any]:
        return {
            "batched": True,
            "batch_size": 1000,
            "num_proc": self.num_proc if self.num_proc > 1 else None,
            "new_fingerprint": fp[:32],
        }

    def _apply(self, state: _State, step: str, fp: str, function: Any, **kwargs: Any) -> None:
        """Applies a batched row-wise function to the whole data or to each part."""
        if state.parts:
            for name in list(state.parts):
                part_fp = fingerprint(fp, name)
                state.parts[name] = state.parts[name].map(function, **self._map_kwargs(part_fp), **kwargs)
                state.part_fps[name] = part_fp
        else:
            state.data = state.data.map(function, **self._map_kwargs(fp), **kwargs)
        state.data_fp, state.data_step = fp, step

    def _step_load(self, state: _State, ledger: StepLedger, work: Path) -> None:
        if self.dataset is None:
            data = make_demo_corpus(
                self.demo_size, seed=self.seed, sources=self.demo_sources, cache_dir=work / "hf"
            )
        else:
            data = self._load_dataset(work)
        columns = [self.text_column, self.label_column, *self.numeric_columns]
        if self.group_column:
            columns.append(self.group_column)
        for column in columns:
            if column not in data.column_names:
                raise DataError(
                    f"the configured column is not in the data (columns: {', '.join(data.column_names)}); "
                    "fix text_column / label_column / numeric_columns / group_column",
                    step="load",
                    column=column,
                )
        if len(data) == 0:
            raise DataError("the dataset is empty: there is nothing to prepare", step="load")
        dtype = getattr(data.features[self.text_column], "dtype", None)
        if dtype not in ("string", "large_string"):
            raise DataError(
                f"expected a string column for the text, got {data.features[self.text_column]}; "
                "set text_column to the column that holds the text",
                step="load",
                column=self.text_column,
            )
        state.data = data.select_columns(list(dict.fromkeys(columns)))
        fp = fingerprint(
            "load", CODE_VERSION, self._config_identity()["dataset"], self._load_identity(), len(data)
        )
        state.data_fp, state.data_step = fp, "load"
        ledger.record(
            "load", output=fp, params={"dataset": self.dataset or "demo"}, stats={"rows": len(data)}
        )

    def _load_dataset(self, work: Path) -> datasets.Dataset:
        files = _local_files(self.data_files)
        if files and all(f.stat().st_size == 0 for f in files):
            raise DataError(
                f"the dataset is empty: every data file is empty ({', '.join(map(str, files))})", step="load"
            )
        try:
            return datasets.load_dataset(
                self.dataset,
                name=self.dataset_config,
                data_files=self.data_files,
                split=self.load_split,
                cache_dir=str(work / "hf"),
            )
        except (DataError, KeyboardInterrupt):
            raise
        except Exception as err:  # datasets raises many kinds; the user needs the step and the input
            raise DataError(
                f"could not load dataset={self.dataset!r} data_files={self.data_files!r}: "
                f"{type(err).__name__}: {err}; check the name, the files and load_split={self.load_split!r}",
                step="load",
            ) from err

    def _load_identity(self) -> dict[str, Any]:
        ident = self._config_identity()
        return {k: ident.get(k) for k in ("dataset_config", "load_split", "data_files", "demo")}

    def _step_clean(self, state: _State, ledger: StepLedger, work: Path) -> None:
        inputs = {state.data_step: _current_fp(state)}
        fp = fingerprint("clean", CODE_VERSION, inputs, self.lowercase, self._override_identity())
        before = _rows(state)
        self._apply(state, "clean", fp, _CleanRows(self._for_workers()))
        rows = _rows(state)
        if rows == 0:
            raise DataError(
                "every row is empty after cleaning (the text was only markup or whitespace); "
                "check text_column, or override clean()",
                step="clean",
                column=self.text_column,
            )
        parts = dict(state.part_fps) if state.parts else {}
        for name, part in state.parts.items():
            if len(part) == 0:
                raise DataError(
                    f"the {name} split is empty after cleaning; use more data or another val_fraction",
                    step="clean",
                    column=self.text_column,
                )
        ledger.record(
            "clean",
            inputs=inputs,
            output=fp,
            parts=parts,
            params={"lowercase": self.lowercase},
            stats={"rows": rows, "dropped": before - rows},
        )

    def _step_engineer_features(self, state: _State, ledger: StepLedger, work: Path) -> None:
        inputs = {state.data_step: _current_fp(state)}
        fp = fingerprint("engineer_features", CODE_VERSION, inputs, list(self.engineered_features))
        self._apply(state, "engineer_features", fp, self._for_workers().engineer_features)
        ledger.record(
            "engineer_features",
            inputs=inputs,
            output=fp,
            parts=dict(state.part_fps) if state.parts else {},
            stats={"features": list(self.engineered_features)},
        )

    def _step_split(self, state: _State, ledger: StepLedger, work: Path) -> None:
        key = self.group_column or self.text_column
        inputs = {s: r.output for s in ("clean", "engineer_features") if (r := ledger.latest(s)) is not None}
        inputs.setdefault(state.data_step, state.data_fp)
        data = state.data
        flags, train_labels, val_labels = [], set(), set()
        columns = list(dict.fromkeys([key, self.label_column]))
        for batch in data.select_columns(columns).with_format("arrow").iter(batch_size=10000):
            f = is_val(batch[key].to_pylist(), self.val_fraction, self.seed, text=self.group_column is None)
            flags.append(f)
            labels = batch[self.label_column]
            train_labels.update(pc.unique(labels.filter(pa.array(~f))).to_pylist())
            val_labels.update(pc.unique(labels.filter(pa.array(f))).to_pylist())
        flag = np.concatenate(flags) if flags else np.zeros(0, dtype=bool)
        params = {"val_fraction": self.val_fraction, "seed": self.seed, "key": key}
        fp = fingerprint("split", CODE_VERSION, inputs, params)
        digest = fingerprint(fp, hashlib.sha256(np.packbits(flag).tobytes()).hexdigest())
        train_idx, val_idx = np.flatnonzero(~flag), np.flatnonzero(flag)
        for name, idx in (("train", train_idx), ("val", val_idx)):
            if len(idx) == 0:
                raise DataError(
                    f"the {name} split is empty ({len(flag)} rows, val_fraction={self.val_fraction}); "
                    "use more data or another val_fraction",
                    step="split",
                    column=key,
                )
        if None in train_labels or None in val_labels:
            raise DataError(
                "some labels are missing (None); drop or label those rows",
                step="split",
                column=self.label_column,
            )
        unseen = val_labels - train_labels
        if unseen:
            raise DataError(
                f"label(s) {sorted(map(str, unseen))} appear in validation but never in train: the model "
                "cannot learn them; use more data, another seed, or drop those rows",
                step="split",
                column=self.label_column,
            )
        # Flattened: later steps then read contiguous Arrow; iterating an index mapping instead
        # gathers rows and keeps memory that grows with the data.
        nproc = self.num_proc if self.num_proc > 1 else None
        state.parts = {
            name: data.select(idx).flatten_indices(
                num_proc=nproc, new_fingerprint=fingerprint(fp, name, "rows")
            )
            for name, idx in (("train", train_idx), ("val", val_idx))
        }
        state.part_fps = {"train": fingerprint(digest, "train"), "val": fingerprint(digest, "val")}
        state.data, state.data_fp, state.data_step = None, fp, "split"
        state.label_names = sorted(train_labels, key=lambda v: (str(type(v)), v))
        ledger.record(
            "split",
            inputs=inputs,
            output=fp,
            parts=state.part_fps,
            params=params,
            stats={"train_rows": len(train_idx), "val_rows": len(val_idx)},
        )

    def _fit_source(self, state: _State, ledger: StepLedger) -> tuple[datasets.Dataset, str, dict[str, str]]:
        """The data a fitted step learns from: the train split, or all rows before the split."""
        if state.parts:
            # Row-wise steps after the split keep the rows of the train split: it is still the
            # split's train part that the step learns from.
            train_fp = ledger.latest("split").parts["train"]
            return state.parts["train"], train_fp, {"split": train_fp}
        return state.data, state.data_fp, {state.data_step: state.data_fp}

    def _step_fit_features(self, state: _State, ledger: StepLedger, work: Path) -> None:
        source, seen, inputs = self._fit_source(state, ledger)
        names = self.feature_names
        stats = fit_statistics(source, names, constant_ok=self.engineered_features)
        fp = fingerprint("statistics", stats)
        state.statistics = stats
        ledger.record(
            "fit_features",
            inputs=inputs,
            output=fp,
            fitted_on=seen,
            stats={"columns": names, "mean": stats["mean"], "std": stats["std"], "rows": stats["count"]},
        )

    def _step_build_vocab(self, state: _State, ledger: StepLedger, work: Path) -> None:
        source, seen, inputs = self._fit_source(state, ledger)
        clean = ledger.latest("clean")
        if clean is not None:
            inputs = {"clean": clean.output, **inputs}
        tokenizer = train_tokenizer(
            lambda: text_batches(source, self.text_column),
            self.target_vocab_size,
            self.tokenizer_kind,
            length=len(source),
            alphabet=text_alphabet(source, self.text_column) if self.tokenizer_kind == "wordpiece" else None,
        )
        state.tokenizer = tokenizer
        fp = fingerprint("vocab", tokenizer.to_str())
        ledger.record(
            "build_vocab",
            inputs=inputs,
            output=fp,
            fitted_on=seen,
            params={"vocab_size": self.target_vocab_size, "tokenizer": self.tokenizer_kind},
            stats={"vocab_size": tokenizer.get_vocab_size(), "rows": len(source)},
        )

    def _step_encode(self, state: _State, ledger: StepLedger, work: Path) -> None:
        inputs = {s: r.output for s in ("fit_features", "build_vocab") if (r := ledger.latest(s)) is not None}
        names = self.feature_names
        stats = state.statistics if not self.deferred_fit else None
        if stats is None:  # statistics fitted later (per shard) or never: store raw features
            state.statistics = {"columns": names, "mean": None, "std": None, "count": 0}
        encoder = Encoder(
            state.tokenizer.to_str(),
            self.text_column,
            self.group_column or self.text_column,
            names,
            self.label_column,
            {v: i for i, v in enumerate(state.label_names)},
            self._max_length,
            mean=None if stats is None else stats["mean"],
            std=None if stats is None else stats["std"],
        )
        fp = fingerprint("encode", CODE_VERSION, inputs, self._max_length, state.part_fps)
        schema = encoded_features(self._max_length, len(names))
        parts = {}
        for name, part in state.parts.items():
            parts[name] = fingerprint(fp, name)
            state.encoded[name] = part.map(
                encoder, remove_columns=part.column_names, features=schema, **self._map_kwargs(parts[name])
            )
        ledger.record(
            "encode",
            inputs=inputs,
            output=fp,
            parts=parts,
            params={"max_length": self._max_length},
            stats={f"{k}_rows": len(v) for k, v in state.encoded.items()},
        )

    # -- reading the prepared data -----------------------------------------------------------
    def _ensure_prepared(self) -> Path:
        if not _cache.is_complete(self.cache_path, self.cache_key):
            self.prepare_data()
        return self.cache_path

    def _manifest(self) -> StepLedger:
        if self._ledger is None:
            self._ledger = StepLedger.load(self._ensure_prepared())
        return self._ledger

    @property
    def ledger(self) -> StepLedger:
        """The ledger: the prepared manifest, plus this rank's ``shard`` record after ``setup``."""
        return self._manifest()

    @property
    def dims(self) -> dict[str, int]:
        """``vocab_size``, ``num_features``, ``num_classes``, ``max_length`` (prepares if needed)."""
        return dict(self._manifest().info["dims"])

    @property
    def vocab_size(self) -> int:
        """The trained vocabulary's size (may be below the requested ``vocab_size``)."""
        return self.dims["vocab_size"]

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
        return self._max_length

    @property
    def tokenizer(self) -> Tokenizer:
        """The trained :class:`tokenizers.Tokenizer` (read from the cache)."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_file(str(self._ensure_prepared() / "tokenizer.json"))
        return self._tokenizer

    @property
    def statistics(self) -> dict[str, Any]:
        """The fitted feature statistics (``columns``, ``mean``, ``std``, ``count``) used by the dataloaders."""
        if self._setup_key is not None and self.deferred_fit:
            return dict(self._rank_statistics)
        return json.loads((self._ensure_prepared() / "statistics.json").read_text())

    def data_fingerprints(self) -> dict[str, str]:
        """``{"manifest", "split", "statistics", "vocab"}``: what every rank and a resumed run must share."""
        fps = dict(self._manifest().info["data_fingerprints"])
        if self.deferred_fit and self._setup_key is not None:
            fps["statistics"] = self._manifest().latest("fit_features").output
        return {k: str(v) for k, v in fps.items()}

    def key_hashes(self, split: str) -> np.ndarray | None:
        """The ``key_hash`` column (int64) of this rank's train shard or of the validation split.

        Read from Arrow without per-row Python; ``None`` before ``setup`` or for an unknown split.
        """
        data = {"train": self._train, "val": self._val}.get(split)
        if data is None:
            return None
        return data.with_format("arrow")["key_hash"].to_numpy().astype(np.int64, copy=False)

    # -- Lightning: setup and dataloaders ----------------------------------------------------
    def _world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return int(trainer.world_size), int(trainer.global_rank)
        return 1, 0

    def setup(self, stage: str | None = None) -> None:
        """Loads the cache on this rank and takes its shard of the train split (step 8).

        Train: an equal-length contiguous shard per rank (see :mod:`lightning_order.data.shard`).
        Validation: the whole split on every rank, so every rank's validation metrics are exact
        and equal (no padding duplicates from a distributed sampler).
        """
        world, rank = self._world()
        key = (self.cache_key, world, rank)
        if self._setup_key == key:
            return
        path = self._ensure_prepared()
        ledger = StepLedger.load(path)
        ledger.rank = rank
        train = datasets.load_from_disk(str(path / "train"))
        val = datasets.load_from_disk(str(path / "val"))
        shard, info = shard_dataset(train, world, rank)
        encode = ledger.latest("encode")
        shard_fp = fingerprint("shard", encode.output, rank, world)
        ledger.record(
            "shard",
            inputs={"encode": encode.output},
            output=shard_fp,
            rank=rank,
            params={"layout": "contiguous"},
            stats={
                "length": info["length"],
                "world_size": world,
                "dropped": info["dropped"],
                "start": info["start"],
            },
        )
        collate = _Collate()
        if self.deferred_fit:
            # The wrong order, on purpose: each rank fits statistics on its own shard.
            names = ledger.info["feature_names"]
            stats = fit_statistics(
                shard, names, matrix_column="features", constant_ok=self.engineered_features
            )
            self._rank_statistics = stats
            ledger.record(
                "fit_features",
                inputs={"shard": shard_fp},
                output=fingerprint("statistics", stats),
                fitted_on=shard_fp,
                rank=rank,
                stats={"columns": names, "mean": stats["mean"], "std": stats["std"], "rows": stats["count"]},
            )
            collate = _Collate(stats["mean"], stats["std"])
        self._train = shard.with_format("torch", columns=list(_BATCH_KEYS))
        self._val = val.with_format("torch", columns=list(_BATCH_KEYS))
        self._collate = collate
        self._ledger = ledger
        self.shard_info = {
            "rank": rank,
            "world_size": world,
            "length": info["length"],
            "dropped": info["dropped"],
        }
        self._setup_key = key

    def _loader(self, data: datasets.Dataset | None, shuffle: bool) -> DataLoader:
        if data is None:
            raise RuntimeError("call setup() before asking for a dataloader (Lightning does it for you)")
        # A one-replica DistributedSampler: the data is already sharded per rank, and Lightning
        # leaves a DistributedSampler alone instead of sharding the shard again.
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=shuffle, seed=self.seed)
        return DataLoader(
            data,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=self._collate,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """Batches of this rank's train shard (``input_ids``, ``attention_mask``, ``features``, ``labels``)."""
        return self._loader(self._train, self.shuffle)

    def val_dataloader(self) -> DataLoader:
        """Batches of the whole validation split (the same on every rank)."""
        return self._loader(self._val, False)

    def test_dataloader(self) -> DataLoader:
        """The validation split again: this module splits train/validation only.

        ``trainer.test`` then reports on held-out rows the model never trained on; for a truly
        separate test set, keep those rows out of ``data_files`` and evaluate them yourself.
        """
        return self._loader(self._val, False)

    def predict_dataloader(self) -> DataLoader:
        """The validation split, in order (see :meth:`test_dataloader`)."""
        return self._loader(self._val, False)


# -- helpers -----------------------------------------------------------------------------------
_PIPELINE_RUNS = 0  # how many times this process ran the preparation (tests: "prepared once")


class _CleanRows:
    """``dm.clean`` then drops rows whose text is empty (a picklable batch function)."""

    def __init__(self, module: OrderedDataModule) -> None:
        self.module = module

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch = self.module.clean(dict(batch))
        texts = batch[self.module.text_column]
        keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        if len(keep) == len(texts):
            return batch
        return {k: [v[i] for i in keep] for k, v in batch.items()}


def _rows(state: _State) -> int:
    return sum(len(p) for p in state.parts.values()) if state.parts else len(state.data)


def _current_fp(state: _State) -> str:
    return state.data_fp


def _output(ledger: StepLedger, step: str) -> str:
    record = ledger.latest(step)
    return "" if record is None else str(record.output)


def _files_identity(data_files: Any) -> Any:
    """Path, size and mtime of every data file (a changed file changes the cache key)."""
    if data_files is None:
        return None
    if isinstance(data_files, dict):
        return {str(k): _files_identity(v) for k, v in sorted(data_files.items())}
    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    out = []
    for name in data_files:
        path = Path(name).expanduser()
        if path.exists():
            st = path.stat()
            out.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
        else:
            out.append([str(name)])  # a glob or a remote path: identified by name only
    return out


def _local_files(data_files: Any) -> list[Path]:
    if data_files is None:
        return []
    if isinstance(data_files, dict):
        return [f for v in data_files.values() for f in _local_files(v)]
    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    return [Path(f).expanduser() for f in data_files if Path(f).expanduser().is_file()]


def _planned_ledger(steps: Sequence[str]) -> StepLedger:
    """The ledger that running ``steps`` in this order would leave (judged at construction)."""
    ledger = StepLedger()
    data_step, data_fp = "", ""
    train_fp = shard_fp = None
    for step in steps:
        reqs = STANDARD_PIPELINE[step].requires
        inputs = {r: ledger.latest(r).output for r in reqs if ledger.has(r)}
        if step == "load":
            record = ledger.record("load", output=fingerprint("plan", "load"))
        elif step == "split":
            if data_step:
                inputs.setdefault(data_step, data_fp)
            out = fingerprint("plan", "split", inputs)
            train_fp = fingerprint(out, "train")
            record = ledger.record(
                step, inputs=inputs, output=out, parts={"train": train_fp, "val": fingerprint(out, "val")}
            )
        elif step in ("fit_features", "build_vocab"):
            seen = train_fp or shard_fp or data_fp
            if train_fp:
                inputs["split"] = train_fp
            record = ledger.record(
                step, inputs=inputs, output=fingerprint("plan", step, seen), fitted_on=seen
            )
        elif step == "shard":
            record = ledger.record(step, inputs=inputs, output=fingerprint("plan", "shard", inputs))
            shard_fp = record.output
        else:
            if step in ("clean", "engineer_features") and data_step:
                inputs.setdefault(data_step, data_fp)
            record = ledger.record(step, inputs=inputs, output=fingerprint("plan", step, inputs))
        if step in ("load", "clean", "engineer_features"):
            data_step, data_fp = step, record.output
    return ledger


def _check_runnable(steps: Sequence[str]) -> None:
    """Raises ``ValueError`` for orders that cannot be executed at all, even with ``enforce=False``."""
    missing = [s for s in _REQUIRED_STEPS if s not in steps]
    if missing:
        raise ValueError(
            f"order must include {', '.join(missing)} (optional: clean, engineer_features, fit_features)"
        )
    pos = {s: i for i, s in enumerate(steps)}
    problems = []
    if pos["load"] != 0:
        problems.append("'load' must come first")
    if (
        "engineer_features" in pos
        and "fit_features" in pos
        and pos["engineer_features"] > pos["fit_features"]
    ):
        problems.append("'engineer_features' must come before 'fit_features' (the features must exist)")
    for before in ("clean", "engineer_features", "split", "build_vocab"):
        if before in pos and pos[before] > pos["encode"]:
            problems.append(f"'{before}' must come before 'encode'")
    if pos["shard"] < pos["encode"]:
        problems.append("'shard' must come after 'encode' (shards are taken in setup)")
    if "fit_features" in pos and pos["fit_features"] > pos["encode"] and pos["fit_features"] < pos["shard"]:
        problems.append("'fit_features' after 'encode' is only possible after 'shard' (per-shard statistics)")
    if problems:
        raise ValueError(
            f"order {list(steps)} cannot be executed, even with enforce=False: " + "; ".join(problems)
        )

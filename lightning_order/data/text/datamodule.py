"""``OrderedDataModule``: the thin stateful shell that runs the registered data steps in order.

The steps are plain functions registered in :mod:`lightning_order.data.engine.runner`; this class checks
the order (a dry run of the same runner, judged by the pipeline), runs the steps before ``shard``
in ``prepare_data`` (one process, under a file lock, into a cache folder named by the pipeline
fingerprint, assigning no state) and the per-rank ones in ``setup``, and serves the loaders.
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lightning_order.data.engine.arguments import config_constructor, positional_order
from lightning_order.data.engine.config import document_arguments, override_identity
from lightning_order.data.engine.datamodule import OrderedDataModuleBase
from lightning_order.data.engine.runner import DataState, StepContext
from lightning_order.data.text import prepare as _prepare
from lightning_order.data.text.artefacts import read_state
from lightning_order.data.text.batches import BATCH_KEYS, Collate
from lightning_order.data.text.cleaning import CleanRows, clean_batch
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.features import ENGINEERED_FEATURES, engineer_batch
from lightning_order.data.text.registry import TextState
from lightning_order.data.text.spec import NAME
from lightning_order.data.text.steps import DATA_STEPS
from lightning_order.ledger import StepLedger
from lightning_order.order import Pipeline

__all__ = ["CODE_VERSION", "DATA_STEPS", "OrderedDataModule"]

#: The config fields kept as attributes of the same name (subclasses' row steps read them).
_ATTRIBUTES: tuple[str, ...]
_ATTRIBUTES = ("dataset", "data_files", "text_column", "label_column", "numeric_columns", "group_column")
_ATTRIBUTES += ("val_fraction", "lowercase", "demo_size", "demo_sources", "demo_seed")
_ATTRIBUTES += ("dataset_config", "load_split", "num_proc")
#: The constructor's positional order (the public contract; types, defaults and docs are DataConfig's).
#: Read from the config's fields (:func:`~lightning_order.data.engine.arguments.positional_order`);
#: two arguments keep the places this DataModule gave them before the base declared them.
_POSITIONAL_ORDER = positional_order(
    DataConfig, ("pipeline",), moved={"shuffle": "demo_seed", "pipeline": "shuffle"}
)
#: The one argument that is no config field: a Pipeline object (not a hyperparameter).
_PIPELINE = inspect.Parameter(
    "pipeline", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=Pipeline | None
)

if TYPE_CHECKING:  # what mypy sees the constructor take: DataConfig's fields, and pipeline

    @dataclass(frozen=True)
    class _Arguments(DataConfig):
        pipeline: Pipeline | None = field(default=None, kw_only=True)

else:
    _Arguments = DataConfig


@document_arguments(
    DataConfig,
    {
        "pipeline": "the pipeline whose data steps run and which judges ``order``; ``None`` for "
        ":data:`~lightning_order.STANDARD_PIPELINE`. Its data steps are the ones registered in "
        ":data:`lightning_order.data.text.registry.STEPS` (see :mod:`lightning_order.data.engine.runner` to add one)."
    },
)
class OrderedDataModule(OrderedDataModuleBase):
    """A LightningDataModule that prepares text classification data in the mandated order.

    Subclass it and override :meth:`clean` or :meth:`engineer_features` (row-wise, stateless),
    or use it as is from a YAML config. Reading :attr:`dims` (or ``vocab_size``,
    ``num_features``, ``num_classes``, ``max_length``) prepares the data, or reads the cached
    manifest, so a model can be built from the data's dimensions right after construction.

    Examples:
        >>> dm = OrderedDataModule(demo_size=2000, vocab_size=500)  # doctest: +SKIP
        >>> model = MyModel(**dm.dims)  # doctest: +SKIP
    """

    pipeline_name: ClassVar[str] = NAME
    config: DataConfig
    # Set from the config (_ATTRIBUTES); the row steps read them.
    text_column: str
    lowercase: bool
    numeric_columns: tuple[str, ...]
    #: Names of the columns :meth:`engineer_features` adds (override with your own features).
    engineered_features: tuple[str, ...] = ENGINEERED_FEATURES

    @config_constructor(_Arguments, _POSITIONAL_ORDER, {"pipeline": _PIPELINE})
    def __init__(self, arguments: dict[str, Any]) -> None:
        """Takes :class:`~lightning_order.data.text.config.DataConfig`'s fields (and ``pipeline``) as keywords."""
        # The generated __init__ saved the hyperparameters with logger=False: the requested
        # vocab_size (a target) would clash with the model's logged vocab_size (the size built).
        self.configure(
            arguments,
            arguments["pipeline"],
            engineered_features=self.engineered_features,
            overrides=override_identity(type(self), OrderedDataModule, ("clean", "engineer_features")),
        )
        for name in _ATTRIBUTES:
            setattr(self, name, getattr(self.config, name))
        self.target_vocab_size, self.tokenizer_kind = self.config.vocab_size, self.config.tokenizer
        self._statistics: dict[str, Any] | None = None
        self._collate_rows = Collate()

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

    def _hooks(self) -> dict[str, Any]:
        # The hooks run in num_proc workers: a shallow copy without trainer or data pickles cheaply.
        clone = copy.copy(self)
        clone.__dict__.update(trainer=None, _ledger=None, _tokenizer=None, _train=None, _val=None)
        # Only overridden row steps are hooks: the default ones run vectorised over Arrow.
        hooks: dict[str, Any] = {}
        if "clean" in self.config.overrides:
            hooks["clean"] = CleanRows(clone.clean, self.text_column)
        if "engineer_features" in self.config.overrides:
            hooks["engineer_features"] = clone.engineer_features
        return hooks

    def _context(self, work: Path | None = None, world: int = 1, rank: int = 0) -> StepContext:
        return replace(super()._context(work, world, rank), feature_names=tuple(self.feature_names))

    @property
    def statistics(self) -> dict[str, Any]:
        """The feature statistics (``columns``, ``mean``, ``std``, ``count``) the dataloaders use."""
        if self._statistics is not None:
            return dict(self._statistics)
        statistics: dict[str, Any] = json.loads((self._ensure_prepared() / "statistics.json").read_text())
        return statistics

    def data_fingerprints(self) -> dict[str, str]:
        """``{"manifest", "split", "statistics", "vocab"}``: what every rank and a resumed run must share."""
        fps = dict(self._manifest().info["data_fingerprints"])
        fit = self._manifest().latest("fit_features")
        if fit is not None:  # after setup, statistics fitted on this rank's shard are this rank's
            fps["statistics"] = fit.output
        return {k: str(v) for k, v in fps.items()}

    def key_hashes(self, split: str) -> np.ndarray | None:
        """The ``key_hash`` column (int64) of this rank's train shard (its rows of the first epoch) or of the validation split.

        Read from Arrow without per-row Python; ``None`` before ``setup`` or for an unknown split.
        """
        data = {"train": self._train, "val": self._val}.get(split)
        if data is None:
            return None
        hashes: np.ndarray = data.with_format("arrow")["key_hash"].to_numpy().astype(np.int64, copy=False)
        return hashes

    def read_prepared(self, path: Path, ledger: StepLedger) -> DataState:
        return read_state(path, ledger)

    def assign(self, state: DataState, ledger: StepLedger) -> None:
        if not isinstance(state, TextState):  # the text steps pass a TextState; anything else is a bug
            raise TypeError(
                f"OrderedDataModule.assign takes the text pipeline's TextState, got {type(state).__name__}"
            )
        stats = state.statistics
        # Statistics fitted after encode (per shard, a wrong order) are applied when batching.
        late = stats is not None and not state.standardised
        self._collate_rows = Collate(stats["mean"], stats["std"]) if late and stats is not None else Collate()
        self._statistics = dict(stats) if stats is not None else None
        self._train = state.parts["train"].with_format("torch", columns=list(BATCH_KEYS))
        self._val = state.parts["val"].with_format("torch", columns=list(BATCH_KEYS))

    def serve(self, train: Any) -> Any:
        return train.with_format("torch", columns=list(BATCH_KEYS))

    def collate_fn(self) -> Collate:
        return self._collate_rows

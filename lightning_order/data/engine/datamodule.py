"""The base of every ordered DataModule: its config, cache, ``prepare_data``, the ``setup`` template and the loaders.

A pipeline's DataModule (``OrderedDataModule``, ``OrderedLMDataModule``, a user's own)
subclasses :class:`OrderedDataModuleBase` and only says what differs: its spec's name
(:attr:`~OrderedDataModuleBase.pipeline_name`, which names its config class, preparation and
step registry in :mod:`lightning_order.pipelines`), its constructor (which hands every argument
to :meth:`~OrderedDataModuleBase.configure`), how a prepared folder is read back into a state
(:meth:`~OrderedDataModuleBase.read_prepared`, the one method without a default), and where the
defaults do not fit, what a rank keeps of the state after the per-rank steps
(:meth:`~OrderedDataModuleBase.assign`), the dataset a loader serves
(:meth:`~OrderedDataModuleBase.to_dataset`) and how it batches
(:meth:`~OrderedDataModuleBase.collate_fn`).

Rank discipline (Lightning's DataModule contract): ``prepare_data`` runs on one process, under a
file lock, writes the cache folder and assigns no state; ``setup`` runs on every rank, reads the
verified cache, runs the per-rank steps (``shard``) and assigns the rank's data.

The train loader is resumable and reads the global order (docs/architecture.md,
:mod:`lightning_order.data.engine.loaders`): the ``shard`` step decides this rank's part of every
global batch, the loader's position (epoch, global samples consumed, seed, global batch, world
size) travels in Lightning's checkpoints, and a resumed run continues at the same sample. The
position travels twice: as the loader's own state (Lightning's stateful-loader support) and as the
DataModule's ``state_dict``, which Lightning restores before any loader exists; the second makes
the resume exact also where Lightning drops the first (a ``configure_optimizers`` that reads
``trainer.estimated_stepping_batches`` builds the loader before the restore, Lightning #20550).
"""

from __future__ import annotations

from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, ClassVar, cast

from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from lightning_order import compat as pl
from lightning_order.data.engine import cache as _cache
from lightning_order.data.engine.config import BaseDataConfig
from lightning_order.data.engine.loaders import ResumableLoader, make_loader, make_train_loader
from lightning_order.data.engine.object_store import is_url
from lightning_order.data.engine.remote_cache import RemoteCache, publish_prepared
from lightning_order.data.engine.runner import DataState, StepContext, run_steps, split_phases
from lightning_order.data.engine.shard_cache import RemoteFiles
from lightning_order.ledger import StepLedger
from lightning_order.order import Pipeline
from lightning_order.parallelism import data_parallel
from lightning_order.pipelines import PIPELINES, resolve
from lightning_order.positions import GlobalOrder, check_position
from lightning_order.spec import PipelineSpec

__all__ = ["OrderedDataModuleBase"]


class OrderedDataModuleBase(pl.LightningDataModule):
    """What every ordered DataModule shares (see the module docstring); subclassed, not used directly.

    A subclass names its pipeline (:attr:`pipeline_name`, registered first), passes its
    constructor's arguments to :meth:`configure` and defines :meth:`read_prepared`
    (``examples/toy_regression.py`` is a whole one).

    Attributes:
        config: the validated arguments (the pipeline's config class).
        order: the data steps that run, in order.
        cache_key: the pipeline fingerprint naming the cache folder.
        shard_info: this rank's ``rank``, ``world_size`` (the data-parallel rank and size it was
            sharded by: tensor-parallel ranks of one group share them), ``length`` (samples it reads
            per epoch), ``dropped`` (samples per epoch that do not fill a global batch) and ``start``
            (its offset in every global batch) after ``setup``.
    """

    #: The name of the spec this DataModule belongs to (a key of :data:`lightning_order.pipelines.PIPELINES`).
    pipeline_name: ClassVar[str]
    #: Files of a cache on object storage that stay there until read (patterns, ``fnmatch``): the
    #: rest (manifest, tokenizer, indexes) is copied to the local mirror, verified, at ``setup``.
    lazy_files: ClassVar[tuple[str, ...]] = ()
    config: BaseDataConfig

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Gives a pipeline's DataModule one read-only attribute per dim of its spec."""
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("pipeline_name")
        if name and name not in PIPELINES:
            raise KeyError(
                f"{cls.__name__}.pipeline_name is {name!r}, which no registered pipeline is "
                f"({', '.join(PIPELINES)}): call lightning_order.register(spec) before defining the class"
            )
        for dim in PIPELINES[name].dims if name else ():
            if dim not in vars(cls) and not any(dim in vars(base) for base in cls.__mro__[1:-1]):
                setattr(cls, dim, _dim_property(dim))

    @classmethod
    def spec(cls) -> PipelineSpec:
        """This DataModule's pipeline spec."""
        return PIPELINES[cls.pipeline_name]

    # -- construction ----------------------------------------------------------------------
    def configure(
        self, arguments: dict[str, Any], pipeline: Pipeline | None = None, **config_extra: Any
    ) -> None:
        """Builds the config from the constructor's arguments, resolves the order and names the cache.

        Called by each subclass's ``__init__`` with every argument (the built-in DataModules'
        are generated from their config class:
        :func:`~lightning_order.data.engine.arguments.config_constructor`).

        Args:
            arguments: the constructor's arguments by name (those that are no field of the
                spec's config class are ignored).
            pipeline: the pipeline that judges the order (default: the spec's).
            **config_extra: config fields the class sets, not the user.

        Raises:
            DataError: an argument is invalid, or the order cannot run at all.
            OrderError: ``enforce`` and the order breaks the pipeline.
        """
        config_class = cast(type[BaseDataConfig], self.spec().config_class())
        self.config = config_class.from_arguments(arguments, **config_extra)
        cfg = self.config
        self.batch_size, self.num_workers, self.cache_dir = cfg.batch_size, cfg.num_workers, cfg.cache_dir
        self.shuffle, self.enforce, self.seed = cfg.shuffle, cfg.enforce, cfg.seed
        self.pipeline: Pipeline = self.spec().pipeline if pipeline is None else pipeline
        preparation = self._preparation()
        self.order: tuple[str, ...] = preparation.order_of(
            cfg, cfg.order, cfg.enforce, self.pipeline, owner=type(self).__name__
        )
        #: The pipeline fingerprint: the hash of everything that shapes the prepared data.
        self.cache_key: str = preparation.cache_key(cfg, self.order)
        #: The cache on object storage (``cache_dir`` an ``s3://`` or other fsspec URL), else ``None``.
        self.remote_cache: RemoteCache | None = (
            RemoteCache(cfg.cache_dir, self.cache_key, cfg.storage_options)
            if cfg.cache_dir is not None and is_url(cfg.cache_dir)
            else None
        )
        self._ledger: StepLedger | None = None
        self._tokenizer: Tokenizer | None = None
        self._verified: tuple[str, str | None] | None = None  # the cache key and build this instance verified
        self._setup_key: tuple[Any, ...] | None = None
        self._train: Any = None  # this rank's train part (its rows of the first epoch), after setup
        self._served: Any = None  # the whole train split the train loader reads by index
        self._global_order: GlobalOrder | None = None  # this rank's global order rule (the shard step's)
        self._val: Any = None
        self._resume_position: dict[str, Any] | None = (
            None  # restored from a checkpoint, for the train loader
        )
        self.shard_info: dict[str, int] = {}

    def _preparation(self) -> Any:
        return resolve(self.spec().preparation)

    def _registry(self) -> Any:
        return self.spec().step_registry()

    def _hooks(self) -> dict[str, Any]:
        """Picklable functions the steps call instead of their defaults (a subclass's own row steps)."""
        return {}

    def _context(self, work: Path | None = None, world: int = 1, rank: int = 0) -> StepContext:
        return StepContext(self.config, work=work, hooks=self._hooks(), rank=rank, world_size=world)

    # -- the cache -------------------------------------------------------------------------
    @property
    def cache_root(self) -> Path:
        """The cache root folder (``cache_dir`` or the default; for a ``cache_dir`` on object storage, its local mirror's)."""
        if self.remote_cache is not None:
            return self.remote_cache.mirror.parent
        return Path(self.cache_dir).expanduser() if self.cache_dir else _cache.default_cache_dir()

    @property
    def cache_path(self) -> Path:
        """The cache folder of this configuration (``<cache_root>/<cache_key>``)."""
        return self.cache_root / self.cache_key

    def prepare_data(self) -> None:
        """Runs the steps before ``shard`` once and publishes the cache folder (no state is assigned).

        Under a file lock: the first process prepares, the others wait and then find the
        finished cache. A complete cache of the same configuration is reused at once. A
        ``cache_dir`` on object storage is published there (:mod:`~.remote_cache`: staged locally,
        uploaded, the manifest last; a lock object instead of the file lock).
        """
        if self.remote_cache is not None:
            publish_prepared(self._preparation(), self.config, self.order, self._hooks(), self.spec().files)
            return
        self._preparation().prepare_cache(
            self.cache_root, self.config, self.order, self._hooks(), required=self.spec().files
        )

    def _ensure_prepared(self) -> Path:
        if self.remote_cache is not None:
            return self._ensure_remote(self.remote_cache)
        # Every file of the cache is verified against the manifest's hashes once per published
        # build: a folder prepared anew since (a damaged one rebuilt by prepare_data) is verified
        # again, and what was read from the old one (manifest, tokenizer) is dropped.
        published = _cache.published_identity(self.cache_path)
        if self._verified != (self.cache_key, published):
            if not _cache.is_complete(self.cache_path, self.cache_key, self.spec().files):
                self.prepare_data()
                published = _cache.published_identity(self.cache_path)
            if self._verified is not None:
                self._ledger, self._tokenizer = None, None
            self._verified = (self.cache_key, published)
        return self.cache_path

    def _ensure_remote(self, remote: RemoteCache) -> Path:
        # The published build on the store is checked with one listing (every listed file there,
        # of its size) and its small files copied to the mirror, verified; large ones are verified
        # as they are fetched (remote_files).
        published = remote.identity()
        if self._verified != (self.cache_key, published):
            if remote.problems(self.spec().files, "setup"):
                self.prepare_data()
                published = remote.identity()
            ledger = remote.load_manifest("setup")
            eager = [
                name
                for name in ledger.info.get("files") or {}
                if not any(fnmatch(name, pattern) for pattern in self.lazy_files)
            ]
            remote.sync(ledger, eager)
            if self._verified is not None:
                self._ledger, self._tokenizer = None, None
            self._verified = (self.cache_key, published)
        return remote.mirror

    def remote_files(self, ledger: StepLedger) -> RemoteFiles | None:
        """The fetcher of the cache's large files into the bounded local cache (``None``: a local cache)."""
        return None if self.remote_cache is None else self.remote_cache.files(ledger)

    def _manifest(self) -> StepLedger:
        if self._ledger is None:
            self._ledger = StepLedger.load(self._ensure_prepared())
        return self._ledger

    # -- what the model and the checks read ------------------------------------------------
    @property
    def ledger(self) -> StepLedger:
        """The ledger: the prepared manifest, plus this rank's ``shard`` record after ``setup``."""
        return self._manifest()

    @property
    def dims(self) -> dict[str, Any]:
        """The data's dims, which the model is built from (prepares the data if needed)."""
        return dict(self._manifest().info["dims"])

    @property
    def tokenizer(self) -> Tokenizer:
        """The :class:`tokenizers.Tokenizer` in use (read from the cache once; the same object after).

        Raises:
            AttributeError: the pipeline prepares no tokenizer (``getattr(dm, "tokenizer", None)``
                is ``None``, as for a DataModule without the attribute).
        """
        if self._tokenizer is None:
            path = self._ensure_prepared() / "tokenizer.json"
            if not path.is_file():
                raise AttributeError(
                    f"{type(self).__name__} has no tokenizer: the {self.pipeline_name!r} pipeline prepares none"
                )
            self._tokenizer = Tokenizer.from_file(str(path))
        return self._tokenizer

    # -- setup: the same template for every pipeline ---------------------------------------
    def setup(self, stage: str | None = None) -> None:
        """Loads the verified cache on this rank and runs the per-rank steps (``shard``)."""
        self._resume_position = None  # a fit restores its checkpoint after setup, never before
        trainer = getattr(self, "trainer", None)
        # The data-parallel size and rank split the data: ranks of one tensor-parallel group read
        # the same share (docs/architecture.md); under DDP they are the world size and global rank.
        dp = data_parallel(trainer)
        world, rank = dp.size, dp.rank
        path = self._ensure_prepared()
        # The published build is part of the key: a folder prepare_data rebuilt is read again,
        # never the memory map of the files it replaced.
        key = (self.cache_key, world, rank, self._verified)
        if self._setup_key == key:
            return
        ledger = StepLedger.load(path)
        ledger.rank = dp.global_rank  # the process that holds the record; its share is the shard's
        state = self.read_prepared(path, ledger)
        registry = self._registry()
        per_rank = split_phases(self.order, registry)[1]
        state = run_steps(per_rank, registry, self._context(None, world, rank), state, ledger)
        self.assign(state, ledger)
        self._served = self.serve(state.extra.get("served", state.parts["train"]))
        # Counted as the loader serves it: what a step keeps may be columns (a dict of arrays).
        self._global_order = state.extra.get("global_order") or GlobalOrder(
            len(self.to_dataset(self._served)), int(self.batch_size), 1, 0, int(self.seed), bool(self.shuffle)
        )
        self._ledger = ledger
        shard = ledger.latest("shard")
        stats = shard.stats if shard is not None else {"length": len(self._train), "dropped": 0}
        self.shard_info = {
            "rank": rank,
            "world_size": world,
            "length": stats["length"],
            "dropped": stats["dropped"],
            "start": stats.get("start", rank * int(self.batch_size)),
        }
        self._setup_key = key

    def read_prepared(self, path: Path, ledger: StepLedger) -> DataState:
        """The state ``setup`` starts from, read from the verified folder ``path`` (every pipeline says).

        Args:
            path: the prepared folder, its files verified against the manifest.
            ledger: its manifest (this rank's records are added to it).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define read_prepared(path, ledger): the state setup() starts "
            "from, read back from what its preparation wrote"
        )

    def assign(self, state: DataState, ledger: StepLedger) -> None:
        """Keeps this rank's parts from the state the per-rank steps left (``train`` and ``val`` by default)."""
        self._train, self._val = state.parts["train"], state.parts.get("val")

    def serve(self, train: Any) -> Any:
        """The whole train split as the train loader reads it (the split itself by default)."""
        return train

    # -- loaders ---------------------------------------------------------------------------
    def collate_fn(self) -> Any:
        """The loaders' ``collate_fn`` (``None``: PyTorch's default, which stacks dicts of tensors)."""
        return None

    def to_dataset(self, data: Any) -> Any:
        """The map-style dataset a loader serves for what ``setup`` kept (the data itself by default)."""
        return data

    def _loader(self, data: Any, shuffle: bool) -> DataLoader:
        dataset = None if data is None else self.to_dataset(data)
        return make_loader(dataset, self.batch_size, shuffle, self.seed, self.num_workers, self.collate_fn())

    def train_dataloader(self) -> ResumableLoader:
        """This rank's part of every global batch of the global train order; resumable.

        The order of an epoch is a function of ``seed`` and the epoch (shuffled when ``shuffle``);
        the loader's position travels in Lightning checkpoints (``state_dict``/``load_state_dict``).
        ``batch_size``, ``seed`` and ``shuffle`` are read now, so a batch-size finder that sets
        ``dm.batch_size`` is honoured.
        """
        order = self._global_order
        if order is not None:
            order = replace(
                order, batch_size=int(self.batch_size), seed=int(self.seed), shuffle=bool(self.shuffle)
            )
            order.require_one_batch("samples")
        data = None if self._served is None or order is None else self.to_dataset(self._served)
        loader = make_train_loader(data, order, self.num_workers, self.collate_fn())  # type: ignore[arg-type]
        loader.progress = self._lightning_progress
        if self._resume_position is not None:
            loader.load_state_dict(self._resume_position)
        return loader

    # -- the data position (Lightning saves a DataModule's state in every checkpoint) --------
    def _fit_train_loader(self) -> ResumableLoader | None:
        loader = getattr(getattr(self, "trainer", None), "train_dataloader", None)
        return loader if isinstance(loader, ResumableLoader) else None

    def _lightning_progress(self) -> tuple[int, int | None] | None:
        """Lightning's ``(batches done in the epoch its loop is in, batches per epoch)``; ``None`` outside a fit."""
        trainer = getattr(self, "trainer", None)
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if loop is None:
            return None
        total = trainer.num_training_batches  # type: ignore[union-attr]
        return int(loop.batch_progress.current.ready), None if total in (None, float("inf")) else int(total)

    def state_dict(self) -> dict[str, Any]:
        """The fit's train loader position (plain data: epoch, global samples consumed, seed, global batch, ...)."""
        loader = self._fit_train_loader()
        position = loader.position() if loader is not None else None
        return {"position": position.to_dict()} if position is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continues the train loader at the saved position (the fit's loader, or the next one made).

        Raises:
            CheckpointError: the saved position holds a field no run could have saved (``epoch=-1``,
                ``samples`` a string or ``None``, a negative count), named with its value.
        """
        position = state_dict.get("position")
        if position:  # refused now, before a loader reads from it (a negative index reads from the end)
            check_position(position)
        self._resume_position = dict(position) if position else None
        loader = self._fit_train_loader()
        if loader is not None and self._resume_position is not None:
            loader.load_state_dict(self._resume_position)

    def val_dataloader(self) -> DataLoader:
        """Batches of the whole validation split (the same on every rank)."""
        return self._loader(self._val, False)

    def test_dataloader(self) -> DataLoader:
        """The validation split again (these DataModules split train/validation only): held-out data."""
        return self._loader(self._val, False)

    def predict_dataloader(self) -> DataLoader:
        """The validation split, in order (see :meth:`test_dataloader`)."""
        return self._loader(self._val, False)


def _dim_property(dim: str) -> property:
    def read(self: OrderedDataModuleBase) -> Any:
        return self.dims[dim]

    note = (
        " (the ``vocab_size`` argument is a target; the size built may be smaller)"
        if dim == "vocab_size"
        else ""
    )
    read.__doc__ = f"The data's ``{dim}``, as the prepared manifest records it (``dims[{dim!r}]``){note}."
    read.__name__ = dim
    return property(read)

"""What a pipeline is, typed: :class:`PipelineSpec` (its facts) and :class:`Preparation` (its interface).

Each pipeline declares one :class:`PipelineSpec` in its own package (``data/text/spec.py``,
``data/lm/spec.py``): its name, its :class:`~lightning_order.order.Pipeline`, the dims its model
is built from, its classes, the checks beyond the order (of a ledger, of a config), its figures,
its demo config and its :class:`Preparation`. :mod:`lightning_order.pipelines` keeps the registry
of specs; a third pipeline is one spec plus one module or package, admitted by
:func:`lightning_order.pipelines.register` (``examples/toy_regression.py``; its preparation a
:class:`~lightning_order.data.engine.preparation.PipelinePreparation`, which derives this
interface from the pipeline's declarations).

Classes and functions are named by import path (``"module:attribute"``) and imported on first
use, so this module imports neither torch nor Lightning: the light commands (``--help``,
``audit``, ``graph``) read every spec.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.order import Pipeline

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.ledger import StepLedger
    from lightning_order.rules import Violation

__all__ = ["PipelineSpec", "Preparation", "resolve"]


def resolve(path: str) -> Any:
    """The object at ``"package.module:attribute"`` (imported now)."""
    module, _, attribute = path.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


def _resolve_class(path: str) -> type:
    value = resolve(path)
    if not isinstance(value, type):
        raise TypeError(f"{path} is a {type(value).__name__}, not a class")
    return value


class Preparation(ABC):
    """How a pipeline prepares its data, without Lightning: what its DataModule and ``prepare`` call.

    Both go through one object, so both compute the same order, the same cache key and the same
    prepared folder. ``config`` is the pipeline's config class (a
    :class:`~lightning_order.data.engine.config.BaseConfig` subclass).
    """

    @abstractmethod
    def plain_config(self, arguments: Mapping[str, Any]) -> Any:
        """The config a plain DataModule of this pipeline builds from ``arguments`` (no subclass)."""

    @abstractmethod
    def order_of(
        self,
        config: Any,
        order: Sequence[str] | str | None,
        enforce: bool = True,
        pipeline: Pipeline | None = None,
        owner: str = "",
    ) -> tuple[str, ...]:
        """The data steps to run: the mandated ones, or ``order`` checked.

        Raises:
            DataError: the order cannot run at all.
            OrderError: ``enforce`` and the order (or the config) breaks the pipeline.
        """

    @abstractmethod
    def cache_key(self, config: Any, order: Sequence[str]) -> str:
        """The fingerprint naming the cache folder: the hash of everything that shapes the data."""

    @abstractmethod
    def prepare_into(
        self, folder: Path, config: Any, order: Sequence[str], hooks: Mapping[str, Any] | None = None
    ) -> None:
        """Runs the steps of ``order`` before the first per-rank one and writes the cache into ``folder``."""

    def prepare_cache(
        self,
        root: Path,
        config: Any,
        order: Sequence[str],
        hooks: Mapping[str, Any] | None = None,
        required: Sequence[str] = (),
    ) -> Path:
        """Prepares ``config`` into ``root/<cache key>`` unless an intact cache is there; returns the folder.

        ``required`` names the files every prepared folder of the pipeline holds (its spec's
        :attr:`PipelineSpec.files`): a folder without one is not intact and is prepared anew.
        """
        # Deferred for load time, not for a cycle: --help reads the specs and skips filelock.
        from lightning_order.data.engine import cache

        key = self.cache_key(config, order)
        cache.build_once(
            root,
            key,
            lambda folder: self.prepare_into(folder, config, order, hooks),
            lock_timeout=config.lock_timeout,
            required=required,
        )
        return root / key


@dataclass(frozen=True)
class PipelineSpec:
    """Everything one pipeline is, for everything that must pick one or read its facts.

    Attributes:
        name: the registry key and the manifest's ``info["pipeline"]``; written nowhere else.
        pipeline: the DAG that judges its ledgers (its data steps built from its step registry).
        dims: the data dims its model is built from, linked from the DataModule into the model
            by the CLI and compared by the model check before step 1 (docs/architecture.md, "Dims contract").
        datamodule: import path of its DataModule class.
        model: import path of its reference model class.
        config: import path of its config class (the DataModule's arguments, typed and documented).
        preparation: import path of its :class:`Preparation` instance.
        steps: import path of its data steps' :class:`~lightning_order.data.engine.runner.StepRegistry`.
        ledger_checks: import paths of pure functions ``f(ledger) -> list[Violation]`` that judge
            what the order alone cannot (e.g. end-of-text tokens recorded by ``encode``).
        config_checks: import paths of pure functions ``f(config, owner) -> list[Violation]``: a
            config the pipeline refuses when the order is enforced (e.g. ``eos=False``).
        summary: import path of ``f(console, datamodule, model, stage, metrics)``, what the CLI
            prints after the metrics (``None``: nothing).
        figures: import path of ``f(ledger) -> [(label, text)]``, the figures ``audit`` and
            ``prepare`` print under a ledger of this pipeline (``None``: none).
        files: what every prepared folder of it holds (a cache without one is incomplete, whatever
            its manifest lists).
        demo_config: its demo config (``configs/...``), shown by ``--help``.
        token_checks: the validator proves its token ids, end-of-text and tokenizer (an LM).
        title: a few words for tables and help texts.
        pipeline_label: how messages name :attr:`pipeline` for a user to pass it (``"LM_PIPELINE"``).
    """

    name: str
    pipeline: Pipeline
    dims: tuple[str, ...]
    datamodule: str
    model: str
    config: str
    preparation: str
    steps: str
    ledger_checks: tuple[str, ...] = ()
    config_checks: tuple[str, ...] = ()
    summary: str | None = None
    figures: str | None = None
    files: tuple[str, ...] = ()
    demo_config: str | None = None
    token_checks: bool = False
    title: str = ""
    pipeline_label: str = ""

    def datamodule_class(self) -> type:
        """The DataModule class (imported now)."""
        return _resolve_class(self.datamodule)

    def model_class(self) -> type:
        """The reference model class (imported now)."""
        return _resolve_class(self.model)

    def config_class(self) -> type:
        """The config class (imported now; no torch)."""
        return _resolve_class(self.config)

    def step_registry(self) -> Any:
        """The registry of the data steps (imported now)."""
        return resolve(self.steps)

    def preparer(self) -> Preparation:
        """The :class:`Preparation` (imported now; no torch)."""
        preparation = resolve(self.preparation)
        if not isinstance(preparation, Preparation):
            raise TypeError(f"{self.preparation} is a {type(preparation).__name__}, not a Preparation")
        return preparation

    def summary_printer(self) -> Callable[..., None] | None:
        """What the CLI prints after the metrics, or ``None``."""
        return resolve(self.summary) if self.summary else None

    def ledger_figures(self, ledger: StepLedger) -> list[tuple[str, str]]:
        """The figures to print under ``ledger`` (``[]`` for a pipeline without any)."""
        return list(resolve(self.figures)(ledger)) if self.figures else []

    def check(self, ledger: StepLedger, pipeline: Pipeline | None = None) -> list[Violation]:
        """Every violation of ``ledger``: the order (``pipeline``, default this one's) and the ledger checks."""
        # Deferred for load time, not for a cycle: --help reads the specs and skips rich and numpy.
        from lightning_order.checks.ledger import check_ledger
        from lightning_order.checks.report import merge_violations

        found = check_ledger(ledger, pipeline or self.pipeline)
        return merge_violations(found, *(resolve(path)(ledger) for path in self.ledger_checks))

    def check_config(self, config: Any, owner: str) -> list[Violation]:
        """Every violation of ``config`` itself (what an enforced order refuses before any step runs)."""
        return [v for path in self.config_checks for v in resolve(path)(config, owner)]

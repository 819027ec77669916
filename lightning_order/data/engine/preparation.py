"""A pipeline's :class:`~lightning_order.spec.Preparation` derived from its declarations, and its manifest.

A new pipeline declares its steps once (a :class:`~lightning_order.data.engine.registry.StepRegistry`
bound to its :class:`~lightning_order.order.Pipeline`) and its arguments once (a
:class:`~lightning_order.data.engine.config.BaseDataConfig` subclass). :class:`PipelinePreparation`
derives from those the order (the mandated one, or a requested one checked), the cache key
(:func:`config_cache_key`: the hash of the config's identity) and the run (the runner, into a
scratch folder); the pipeline writes only its files (:meth:`PipelinePreparation.write`), and
:func:`write_manifest` writes the manifest after them, as the built-in pipelines do: the dims, the
data fingerprints and every file's size and content hash, so the cache is verified before use.

The trade-off: the preparation is the runner's, with one process and no engine; a pipeline that
needs more (the LM's partitions on Ray) writes its own :class:`~lightning_order.spec.Preparation`,
and still ends with :func:`write_manifest`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.data.engine.cache import TEMP_MARKER
from lightning_order.data.engine.runner import DataState, StepContext, resolve_order, run_preparation
from lightning_order.data.engine.storage import file_records, storage_errors
from lightning_order.ledger import MANIFEST_NAME, StepLedger, fingerprint
from lightning_order.spec import Preparation

if TYPE_CHECKING:  # pragma: no cover - typing only
    from lightning_order.data.engine.config import BaseDataConfig
    from lightning_order.data.engine.registry import StepRegistry
    from lightning_order.order import Pipeline

__all__ = ["PipelinePreparation", "config_cache_key", "write_manifest"]

#: What a prepared folder holds that is no prepared file: the manifest (which lists the files), the
#: cache's marker of a folder being written, and the steps' scratch folder (removed after writing).
_NOT_PREPARED = (MANIFEST_NAME, TEMP_MARKER, "work")


def config_cache_key(pipeline: str, config: BaseDataConfig, order: Sequence[str]) -> str:
    """The default cache key of a pipeline: the fingerprint of ``config``'s identity and the order.

    Every config field enters unless it is declared not to shape the data (``SERVES``: the batch
    size, the cache folder...), so a new field changes the key without anyone listing it.

    Args:
        pipeline: the pipeline's name (two pipelines never share a key).
        config: the pipeline's config.
        order: the data steps that run, in order.
    """
    return fingerprint(f"lightning_order.{pipeline}", config.identity(order))


def write_manifest(
    folder: Path,
    ledger: StepLedger,
    dims: Mapping[str, Any],
    data_fingerprints: Mapping[str, str] | None = None,
    **info: Any,
) -> Path:
    """Writes ``ledger`` as the manifest of the prepared ``folder``, after every prepared file.

    The manifest is what makes a folder a cache: it records the dims the model is built from, the
    data fingerprints a checkpoint carries (``manifest``, the ledger's own, plus
    ``data_fingerprints``) and the size and xxh3 hash of every file written so far, which a later
    run verifies before it trusts the folder. Write it last: a folder without one is unfinished.

    Args:
        folder: the (temporary) folder being prepared.
        ledger: the steps' records; its ``info`` receives what is written here.
        dims: the data's dims (the names of the spec's ``dims``).
        data_fingerprints: more fingerprints every rank and a resumed run must share.
        **info: anything else the manifest's ``info`` should hold (plain data).

    Returns:
        The manifest's path.

    Raises:
        DataError: the folder cannot be written (a full disk, a denied write), naming it.
    """
    fps = {"manifest": ledger.fingerprint, **(data_fingerprints or {})}
    with storage_errors("save", folder):
        ledger.info.update(info, dims=dict(dims), data_fingerprints=fps)
        ledger.info["files"] = file_records(folder, skip=_NOT_PREPARED)
        return ledger.save(folder)


class PipelinePreparation(Preparation):
    """The :class:`~lightning_order.spec.Preparation` of a pipeline of registered steps.

    Subclass it and say where the prepared files go (:meth:`write`); the order, the cache key,
    the run and the manifest come from the declarations.

    Args:
        name: the pipeline's name (its spec's ``name``).
        config: its config class.
        steps: its step registry, bound to its pipeline.
        final: the data form a runnable order leaves (``"shard"``: every rank holds its share).

    Examples:
        >>> class MyPreparation(PipelinePreparation):  # doctest: +SKIP
        ...     def write(self, folder, state, ledger):
        ...         np.savez(folder / "train.npz", **state.parts["train"])
        ...         return {"num_inputs": 1}
        >>> PREPARATION = MyPreparation("mine", MyConfig, MY_STEPS)  # doctest: +SKIP
    """

    def __init__(
        self, name: str, config: type[BaseDataConfig], steps: StepRegistry, final: str = "shard"
    ) -> None:
        if steps.pipeline is None:
            raise TypeError(f"the steps of pipeline {name!r} must be a StepRegistry bound to its Pipeline")
        self.name, self.config, self.steps, self.final = name, config, steps, final

    def plain_config(self, arguments: Mapping[str, Any]) -> BaseDataConfig:
        """The config of the arguments that are fields of :attr:`config`."""
        return self.config.from_arguments(arguments)

    def order_of(
        self,
        config: Any,
        order: Sequence[str] | str | None,
        enforce: bool = True,
        pipeline: Pipeline | None = None,
        owner: str = "",
    ) -> tuple[str, ...]:
        """The data steps to run (see :func:`~lightning_order.data.engine.runner.resolve_order`)."""
        chosen = self.steps.pipeline if pipeline is None else pipeline
        return resolve_order(
            order,
            self.steps,
            chosen,  # type: ignore[arg-type]  # bound: checked in __init__
            config,
            enforce=enforce,
            final=self.final,
            owner=owner or f"the {self.name} DataModule",
        )

    def cache_key(self, config: Any, order: Sequence[str]) -> str:
        """:func:`config_cache_key` of this pipeline."""
        return config_cache_key(self.name, config, order)

    def prepare_into(
        self, folder: Path, config: Any, order: Sequence[str], hooks: Mapping[str, Any] | None = None
    ) -> None:
        """Runs the steps before the first per-rank one, :meth:`write`, then :func:`write_manifest`."""
        identity = {
            "cache_key": self.cache_key(config, order),
            "pipeline": self.name,
            "config": config.identity(order),
        }

        def write(state: DataState, ledger: StepLedger) -> None:
            with storage_errors("save", folder):
                dims = self.write(folder, state, ledger)
            write_manifest(folder, ledger, dims)

        run_preparation(
            folder, StepContext(config, hooks=dict(hooks or {})), order, self.steps, identity, write
        )

    @abstractmethod
    def write(self, folder: Path, state: DataState, ledger: StepLedger) -> Mapping[str, Any]:
        """Writes the prepared files into ``folder`` (the manifest is written after them).

        Args:
            folder: the temporary cache folder (published whole once the manifest is written).
            state: the state the steps before the first per-rank one left.
            ledger: their records (its ``info`` may receive more plain data for the manifest).

        Returns:
            The data's dims, the values of the spec's ``dims`` (what the model is built from).
        """

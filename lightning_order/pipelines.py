"""One descriptor per pipeline: everything that must pick a pipeline reads it here.

A prepared cache, a checkpoint's ledger, a config or a datamodule belongs to one pipeline, named
as the manifest's ``info["pipeline"]`` (``"standard"`` for text classification, ``"lm"`` for
causal language modelling). :data:`PIPELINES` maps that name to a :class:`PipelineDescriptor`:
the :class:`~lightning_order.order.Pipeline` that judges it, the data steps' registry, the dims
a model is built from, the DataModule and model classes, the ledger checks beyond the order, and
what the command line prints after the metrics. The CLI, ``audit``, ``graph``, the manifest
writers and the validator ask :func:`descriptor_for`; none of them has its own rule.

A third pipeline is one descriptor here and one package under ``lightning_order/data/``.

Classes and functions are named by import path (``"module:attribute"``) and imported on first
use, so this module imports neither torch nor Lightning: the light commands (``--help``,
``audit``, ``graph``) read it too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lightning_order.order import LM_PIPELINE, STANDARD_PIPELINE, Pipeline

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.ledger import StepLedger
    from lightning_order.rules import Violation

__all__ = [
    "DEFAULT_PIPELINE",
    "PIPELINES",
    "PipelineDescriptor",
    "all_dims",
    "descriptor_for",
    "resolve",
]

#: The name a manifest without ``info["pipeline"]`` (every classification cache) belongs to.
DEFAULT_PIPELINE = "standard"


def resolve(path: str) -> Any:
    """The object at ``"package.module:attribute"`` (imported now)."""
    module, _, attribute = path.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class PipelineDescriptor:
    """What one pipeline is, for everything that must pick one.

    Attributes:
        name: the key of :data:`PIPELINES` and the manifest's ``info["pipeline"]``.
        pipeline: the DAG that judges its ledgers.
        dims: the data dims its model is built from, linked from the DataModule into the model
            by the CLI and compared by the model check before step 1 (DESIGN.md §3).
        datamodule: import path of its DataModule class.
        model: import path of its reference model class.
        config: import path of its config class (the DataModule's arguments, typed and documented).
        preparation: import path of its preparation module (``order_of``, ``cache_key``,
            ``prepare_into``, ``prepare_cache``: what the DataModule and the light ``prepare`` call).
        steps: import path of its data steps' :class:`~lightning_order.data.engine.runner.StepRegistry`.
        ledger_checks: import paths of pure functions ``f(ledger) -> list[Violation]`` that judge
            what the order alone cannot (e.g. end-of-text tokens recorded by ``encode``).
        summary: import path of ``f(console, datamodule, model, stage, metrics)``, what the CLI
            prints after the metrics (``None``: nothing).
        figures: import path of ``f(ledger) -> [(label, text)]``, the figures ``audit`` and
            ``prepare`` print under a ledger of this pipeline (``None``: none).
        title: a few words for tables and help texts.
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
    summary: str | None = None
    figures: str | None = None
    title: str = ""

    def datamodule_class(self) -> type:
        """The DataModule class (imported now)."""
        return resolve(self.datamodule)

    def model_class(self) -> type:
        """The reference model class (imported now)."""
        return resolve(self.model)

    def config_class(self) -> type:
        """The config class (imported now; no torch)."""
        return resolve(self.config)

    def step_registry(self) -> Any:
        """The registry of the data steps (imported now)."""
        return resolve(self.steps)

    def summary_printer(self) -> Callable[..., None] | None:
        """What the CLI prints after the metrics, or ``None``."""
        return resolve(self.summary) if self.summary else None

    def ledger_figures(self, ledger: StepLedger) -> list[tuple[str, str]]:
        """The figures to print under ``ledger`` (``[]`` for a pipeline without any)."""
        return list(resolve(self.figures)(ledger)) if self.figures else []

    def check(self, ledger: StepLedger, pipeline: Pipeline | None = None) -> list[Violation]:
        """Every violation of ``ledger``: the order (``pipeline``, default this one's) and the ledger checks."""
        from lightning_order.checks.ledger import check_ledger
        from lightning_order.checks.report import merge_violations

        found = check_ledger(ledger, pipeline or self.pipeline)
        return merge_violations(found, *(resolve(path)(ledger) for path in self.ledger_checks))


#: Every pipeline, by the name its manifests record.
PIPELINES: Mapping[str, PipelineDescriptor] = {
    "standard": PipelineDescriptor(
        name="standard",
        pipeline=STANDARD_PIPELINE,
        dims=("vocab_size", "num_features", "num_classes", "max_length"),
        datamodule="lightning_order.data.text.datamodule:OrderedDataModule",
        model="lightning_order.models.classifier:OrderedTextClassifier",
        config="lightning_order.data.text.config:DataConfig",
        preparation="lightning_order.data.text.prepare",
        steps="lightning_order.data.text.steps:STEPS",
        title="text classification",
    ),
    "lm": PipelineDescriptor(
        name="lm",
        pipeline=LM_PIPELINE,
        dims=("vocab_size", "padded_vocab_size", "block_size"),
        datamodule="lightning_order.data.lm.datamodule:OrderedLMDataModule",
        model="lightning_order.models.causal_lm:OrderedCausalLM",
        config="lightning_order.data.lm.config:LMConfig",
        preparation="lightning_order.data.lm.prepare",
        steps="lightning_order.data.lm.steps:LM_STEPS",
        ledger_checks=("lightning_order.checks.lm:check_lm_records",),
        summary="lightning_order.cli.summaries:print_lm_summary",
        figures="lightning_order.cli.summaries:lm_figures",
        title="causal language modelling",
    ),
}


def all_dims() -> tuple[str, ...]:
    """Every dim any pipeline's model is built from, each once, in registry order."""
    return tuple(dict.fromkeys(dim for d in PIPELINES.values() for dim in d.dims))


def descriptor_for(
    *,
    name: str | None = None,
    info: Mapping[str, Any] | None = None,
    ledger: StepLedger | None = None,
    pipeline: Pipeline | None = None,
    classes: Iterable[type] = (),
) -> PipelineDescriptor:
    """The descriptor of whatever is at hand, the first clue that decides.

    Args:
        name: a pipeline name (``"standard"``, ``"lm"``).
        info: a manifest's ``info`` (its ``"pipeline"`` key; absent means ``"standard"``).
        ledger: a ledger, read through its ``info``; one that names no pipeline belongs to the
            first whose steps include all of its own (a ledger with ``dedup`` is an LM one).
        pipeline: a :class:`~lightning_order.order.Pipeline` object that is one of ours.
        classes: DataModule or model classes (or subclasses of ours).

    Raises:
        KeyError: ``name`` (or the recorded name) is no pipeline; the message lists them.
    """
    if name is None and pipeline is not None:
        name = next((d.name for d in PIPELINES.values() if d.pipeline is pipeline), None)
    if name is None:
        for cls in classes:
            name = _name_of_class(cls)
            if name is not None:
                break
    if name is None and (info is not None or ledger is not None):
        recorded = (info if info is not None else ledger.info).get("pipeline")  # type: ignore[union-attr]
        name = str(recorded) if recorded else _name_of_steps(ledger) if ledger is not None else None
    name = name or DEFAULT_PIPELINE
    if name not in PIPELINES:
        raise KeyError(f"no pipeline named {name!r}; the pipelines are: {', '.join(PIPELINES)}")
    return PIPELINES[name]


def _name_of_steps(ledger: StepLedger) -> str | None:
    """The pipeline a ledger that names none was recorded under, from its step names.

    A ledger written before its pipeline was recorded (a hand-written LM pipeline's, in an older
    checkpoint) holds steps the default pipeline does not have (``dedup``, ``pack``): it belongs
    to the first pipeline that has all of them. ``None`` when the default one has them all.
    """
    steps = {*ledger.steps(), *(ledger.info.get("declared_steps") or ())}
    if all(step in PIPELINES[DEFAULT_PIPELINE].pipeline for step in steps):
        return None
    return next((d.name for d in PIPELINES.values() if all(step in d.pipeline for step in steps)), None)


def _name_of_class(cls: type) -> str | None:
    """The pipeline whose DataModule or model ``cls`` is (or subclasses), matched without importing ours."""
    for klass in getattr(cls, "__mro__", ()):
        path = f"{klass.__module__}:{klass.__qualname__}"
        for descriptor in PIPELINES.values():
            if path in (descriptor.datamodule, descriptor.model):
                return descriptor.name
    return None

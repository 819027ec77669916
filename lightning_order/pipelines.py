"""The registry of pipeline specs: everything that must pick a pipeline asks it here.

A prepared cache, a checkpoint's ledger, a config or a datamodule belongs to one pipeline, named
as the manifest's ``info["pipeline"]``. :data:`PIPELINES` maps that name to the pipeline's
:class:`~lightning_order.spec.PipelineSpec`, declared in its own package
(:mod:`lightning_order.data.text.spec`, :mod:`lightning_order.data.lm.spec`). The CLI, ``audit``,
``graph``, the manifest writers and the validator ask :func:`spec_for`; none of them has its
own rule. A third pipeline is one spec plus one module or package, admitted by :func:`register`
(``examples/toy_regression.py``).

This module imports neither torch nor Lightning: the light commands (``--help``, ``audit``,
``graph``) read it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lightning_order.data.lm.spec import LM_SPEC
from lightning_order.data.text.spec import TEXT_SPEC
from lightning_order.errors import unknown_step_names
from lightning_order.order import Pipeline
from lightning_order.spec import PipelineSpec, resolve

if TYPE_CHECKING:  # pragma: no cover
    from lightning_order.ledger import StepLedger

__all__ = [
    "DEFAULT_PIPELINE",
    "PIPELINES",
    "PipelineSpec",
    "all_dims",
    "check_step_names",
    "spec_for",
    "other_pipeline_with",
    "register",
    "spec_of_class",
    "resolve",
    "unregister",
]

#: The name a manifest without ``info["pipeline"]`` (every classification cache) belongs to.
DEFAULT_PIPELINE = TEXT_SPEC.name

#: Every pipeline, by the name its manifests record (:func:`register` adds one).
PIPELINES: dict[str, PipelineSpec] = {TEXT_SPEC.name: TEXT_SPEC, LM_SPEC.name: LM_SPEC}


def register(spec: PipelineSpec, *, replace: bool = False) -> PipelineSpec:
    """Admits a pipeline: its caches, ledgers, DataModules and models are read through ``spec`` from now on.

    Examples:
        >>> from lightning_order import register  # doctest: +SKIP
        >>> register(PipelineSpec(name="vision", pipeline=..., ...))  # doctest: +SKIP

    Args:
        spec: the pipeline's spec (its name is the manifest's ``info["pipeline"]``).
        replace: allow replacing a registered spec of the same name.

    Returns:
        ``spec``.

    Raises:
        TypeError: ``spec`` is no :class:`~lightning_order.spec.PipelineSpec`.
        ValueError: the name is taken by another spec (pass ``replace=True``).
    """
    if not isinstance(spec, PipelineSpec):
        raise TypeError(f"register() takes a PipelineSpec, got {type(spec).__name__}: {spec!r}")
    old = PIPELINES.get(spec.name)
    if old is not None and old is not spec and not replace:
        raise ValueError(
            f"a pipeline named {spec.name!r} is registered already ({old.title or old.datamodule}); "
            "choose another name, or pass replace=True"
        )
    PIPELINES[spec.name] = spec
    return spec


def unregister(name: str) -> PipelineSpec:
    """Removes the pipeline ``name`` (one :func:`register` added) and returns its spec.

    Raises:
        ValueError: ``name`` is one of the built-in pipelines, or no pipeline.
    """
    if name in (TEXT_SPEC.name, LM_SPEC.name) or name not in PIPELINES:
        raise ValueError(f"cannot unregister {name!r}: registered by register() are {_added() or 'none'}")
    return PIPELINES.pop(name)


def _added() -> str:
    return ", ".join(n for n in PIPELINES if n not in (TEXT_SPEC.name, LM_SPEC.name))


def all_dims() -> tuple[str, ...]:
    """Every dim any pipeline's model is built from, each once, in registry order."""
    return tuple(dict.fromkeys(dim for d in PIPELINES.values() for dim in d.dims))


def other_pipeline_with(pipeline: Pipeline, unknown: Iterable[str]) -> tuple[str, list[str]]:
    """How to name the first registered pipeline, other than ``pipeline``, that has steps of ``unknown``.

    Returns:
        ``(label, those steps)`` (the spec's ``pipeline_label``), or ``("", [])`` when none has any.
    """
    names = list(unknown)
    for spec in PIPELINES.values():
        theirs = [n for n in names if n in spec.pipeline] if spec.pipeline is not pipeline else []
        if theirs:
            return spec.pipeline_label or f"the {spec.name!r} pipeline", theirs
    return "", []


def check_step_names(pipeline: Pipeline, names: Iterable[str], where: str = "") -> None:
    """Raises :class:`~lightning_order.errors.StepNameError` for any name that is no step of ``pipeline``.

    A name that is a step of another registered pipeline is named with that pipeline (pass it),
    not with :meth:`~lightning_order.order.Pipeline.extend`: the registry knows every pipeline,
    the :class:`~lightning_order.order.Pipeline` only its own steps.

    Args:
        pipeline: the pipeline whose step names are valid.
        names: step names as a user wrote them.
        where: what is being declared, for the message.
    """
    unknown = [n for n in names if n not in pipeline]
    if unknown:
        other, theirs = other_pipeline_with(pipeline, unknown)
        raise unknown_step_names(unknown, pipeline.order(), where=where, pipeline=other, theirs=theirs)


def spec_for(
    *,
    name: str | None = None,
    info: Mapping[str, Any] | None = None,
    ledger: StepLedger | None = None,
    pipeline: Pipeline | None = None,
    classes: Iterable[type] = (),
) -> PipelineSpec:
    """The spec of whatever is at hand, the first clue that decides.

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


def spec_of_class(cls: type) -> PipelineSpec | None:
    """The spec whose DataModule or model ``cls`` is (or subclasses); ``None`` for a class of no pipeline."""
    name = _name_of_class(cls)
    return PIPELINES[name] if name is not None else None


def _name_of_class(cls: type) -> str | None:
    """The pipeline whose DataModule or model ``cls`` is (or subclasses), matched without importing ours."""
    for klass in getattr(cls, "__mro__", ()):
        path = f"{klass.__module__}:{klass.__qualname__}"
        for spec in PIPELINES.values():
            if path in (spec.datamodule, spec.model):
                return spec.name
    return None

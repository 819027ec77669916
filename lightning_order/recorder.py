"""Recording hand-written steps in the ledger: a decorator and a context manager, checked names.

A hand-written ``LightningDataModule`` keeps its own code; one line per step it wants judged::

    class MyData(LightningDataModule):
        @record_step("split")
        def split(self, rows):
            return rows[:800], rows[800:]

Each call appends a :class:`~lightning_order.ledger.StepRecord` to ``self.ledger`` (created on
first use) with content fingerprints of what the method read (its arguments) and produced (its
return value; a partition step's ``(train, val)`` become ``parts``), the rank, and for a fitted
step the fingerprint of the data it learned from (``fitted_on``, its first argument). Inputs are
named by the step that produced them, found by fingerprint, so the pipeline's engine sees a step
that bypassed one it requires (a vocabulary built from text that ``clean`` never saw). The names
are the :class:`~lightning_order.order.Pipeline`'s (the standard one unless ``pipeline=`` says
otherwise): an unknown name raises :class:`~lightning_order.errors.StepNameError` when the
decorator is written, never silently records nothing. The ledger lists the steps the datamodule
declares (``info["declared_steps"]``), so the validator judges only those: a step you never
declared is unknown, not missing. A step recorded under one of our pipelines other than the
standard one (``pipeline=LM_PIPELINE``) names it in ``info["pipeline"]``, so the validator judges
the ledger against it without being told. ``params=`` and ``stats=`` record what a rule reads
besides the order (e.g. ``encode``'s ``eos`` parameter, ``pack``'s ``eos_rate``; see
``docs/lm.md``).

Trade-off: fingerprints hash content (tensors, arrays, strings, numbers, containers, map-style
datasets item by item), which costs one pass over what each step reads and returns; derived
objects (a list of texts built from the train rows) have fingerprints of their own, so pass step
outputs themselves to the next step, or name what was read with ``reads=``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from lightning_order.errors import OrderError
from lightning_order.fingerprints import data_fingerprint
from lightning_order.item_hashes import held_out_sample, item_hashes
from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.pipelines import DEFAULT_PIPELINE, PIPELINES, check_step_names, spec_for
from lightning_order.rules import Violation

__all__ = [
    "StepRecording",
    "data_fingerprint",
    "datamodule_ledger",
    "declared_steps",
    "ledger_pipeline",
    "record_step",
    "recorded_fingerprints",
    "recording",
    "require_steps",
]

log = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])
#: ``params=`` of :func:`record_step`: a mapping, or a function of ``self`` returning one.
Params = Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None
#: ``stats=`` of :func:`record_step`: a mapping, or a function of ``(self, result)`` returning one.
Stats = Mapping[str, Any] | Callable[[Any, Any], Mapping[str, Any]] | None
_MARK = "__lightning_order_step__"
_PARTS = ("train", "val", "test")


def declared_steps(cls: type) -> list[str]:
    """The step names a class's methods record (:func:`record_step`), in the class's order."""
    names = [getattr(getattr(cls, attr, None), _MARK, None) for attr in dir(cls)]
    return sorted({n for n in names if n}, key=names.index)


#: The data fingerprints a recorded ledger yields, by the step that produces each (the keys of
#: ``OrderedDataModule.data_fingerprints()``).
_FINGERPRINT_STEPS = {"split": "split", "statistics": "fit_features", "vocab": "build_vocab"}


def recorded_fingerprints(ledger: StepLedger) -> dict[str, str]:
    """``{"split", "statistics", "vocab"}`` -> fingerprint, from a ledger this module wrote.

    The validator compares them across ranks and keeps them in checkpoints, as it does
    ``data_fingerprints()``; a ledger not written by :func:`record_step` yields ``{}``.
    """
    if not ledger.info.get("declared_steps"):
        return {}
    found = {key: ledger.latest(step) for key, step in _FINGERPRINT_STEPS.items()}
    return {key: record.output for key, record in found.items() if record is not None and record.output}


def datamodule_ledger(dm: Any) -> StepLedger | None:
    """``dm.ledger`` when it is a :class:`~lightning_order.ledger.StepLedger` (ours, or one recorded here), else ``None``."""
    ledger = getattr(dm, "ledger", None) if dm is not None else None
    return ledger if isinstance(ledger, StepLedger) else None


def ledger_pipeline(dm: Any, ledger: StepLedger | None, configured: Pipeline = STANDARD_PIPELINE) -> Pipeline:
    """The pipeline that judges ``dm``'s ledger (read by the validator and the monitor alike).

    A pipeline the user configured (anything but the default) is kept. Otherwise a user's own
    :class:`~lightning_order.order.Pipeline` on the datamodule (``dm.pipeline``) judges its
    ledger; for ours, :func:`~lightning_order.pipelines.spec_for` decides: the datamodule's
    own ``pipeline``, else the name the ledger records (``info["pipeline"]``), else the default.

    Args:
        dm: the datamodule (or ``None``).
        ledger: its ledger (or ``None``).
        configured: the pipeline the caller was given (``OrderValidator(pipeline=...)``).
    """
    if configured is not STANDARD_PIPELINE:
        return configured
    own = getattr(dm, "pipeline", None) if dm is not None else None
    own = own if isinstance(own, Pipeline) else None
    if own is not None and all(own is not d.pipeline for d in PIPELINES.values()):
        return own  # declared by the datamodule, not one of ours: judged as declared
    try:
        return spec_for(pipeline=own, ledger=ledger).pipeline
    except KeyError as err:  # a ledger of a pipeline this version does not know
        log.debug("lightning_order: %s; judging on the configured pipeline", err)
        return configured


def _rank(owner: Any) -> int:
    trainer = getattr(owner, "trainer", None)
    if trainer is not None:
        with contextlib.suppress(Exception):
            return int(trainer.global_rank)
    for variable in ("RANK", "GLOBAL_RANK", "LOCAL_RANK"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return 0


#: What each recorded step read, by ledger, in this process: ``[(step, read fingerprints)]``.
_READS: weakref.WeakKeyDictionary[StepLedger, list[tuple[str, tuple[str, ...]]]] = weakref.WeakKeyDictionary()


def _new_run(ledger: StepLedger, step: str, fps: Sequence[str]) -> bool:
    """Whether recording ``step`` now starts a new run of the pipeline (Lightning calls setup again).

    A step repeated on the very data it read before starts a new run; repeated on other data
    (another split: ``encode(train)``, ``pack(train)``, then ``encode(val)``) it is the same run.
    Without what the earlier records read (a ledger loaded from disk), a step already there that
    is not just repeated on the next part (``clean(train)``, ``clean(val)``) starts a new run.
    """
    records = ledger.records
    if not records or records[-1].step == step or not any(r.step == step for r in records):
        return False
    reads = _READS.get(ledger)
    if reads is None or len(reads) != len(records):
        return True
    return any(name == step and read == tuple(fps) for name, read in reads)


def _ledger(owner: Any, pipeline: Pipeline, step: str, fps: Sequence[str] = ()) -> StepLedger:
    ledger = getattr(owner, "ledger", None)
    # A step repeated on the data it read before starts a new run of the pipeline: judged on its own.
    if not isinstance(ledger, StepLedger) or _new_run(ledger, step, fps):
        info = {"declared_steps": ledger.info.get("declared_steps")} if isinstance(ledger, StepLedger) else {}
        ledger = StepLedger(info={k: v for k, v in info.items() if v}, rank=_rank(owner))
        owner.ledger = ledger
    declared = list(ledger.info.get("declared_steps") or declared_steps(type(owner)))
    if step not in declared:
        declared.append(step)
    ledger.info["declared_steps"] = pipeline.subset(declared) or declared
    name = next((d.name for d in PIPELINES.values() if d.pipeline is pipeline), None)
    if name is not None and name != DEFAULT_PIPELINE:  # a ledger naming none is the default's
        ledger.info["pipeline"] = name  # audit and the validator judge it by its own pipeline
    ledger.rank = _rank(owner)
    return ledger


def _producer(ledger: StepLedger, fp: str) -> StepRecord | None:
    return next((r for r in reversed(ledger.records) if fp in r.produced), None)


def _inputs(ledger: StepLedger, pipeline: Pipeline, step: str, fps: Sequence[str]) -> dict[str, str]:
    """Each read fingerprint by the step it came from; under a required step when it bypassed it."""
    inputs: dict[str, str] = {}
    requires = pipeline[step].requires
    for fp in fps:
        producer = _producer(ledger, fp)
        if producer is None:
            continue
        name = producer.step
        if name not in requires and name in pipeline:
            # It came from upstream of a requirement that ran: name it after that requirement, so
            # the engine reports the bypass (e.g. build_vocab on text that clean never saw).
            bypassed = [r for r in requires if ledger.has(r) and name in pipeline.ancestors(r)]
            name = bypassed[0] if bypassed else name
        inputs.setdefault(name, fp)
    return inputs


def _write(
    owner: Any,
    pipeline: Pipeline,
    step: str,
    fps: Sequence[str],
    result: Any,
    has_result: bool,
    params: Mapping[str, Any] | None = None,
    stats: Mapping[str, Any] | None = None,
    first: Any = None,
) -> StepRecord:
    ledger = _ledger(owner, pipeline, step, fps)
    reads = _READS.get(ledger, []) if len(_READS.get(ledger, [])) == len(ledger.records) else None
    inputs = _inputs(ledger, pipeline, step, fps)
    kind = pipeline[step].kind
    parts: dict[str, str] = {}
    output = None
    if kind == "partition" and isinstance(result, Mapping) and "train" in result:
        parts = {str(k): data_fingerprint(v) for k, v in result.items()}
    elif kind == "partition" and isinstance(result, (tuple, list)) and 2 <= len(result) <= 3:
        parts = {name: data_fingerprint(v) for name, v in zip(_PARTS, result)}
    elif has_result and result is not None:
        output = data_fingerprint(result)
    if parts:
        output = data_fingerprint(sorted(parts.items()))
    fitted_on = None
    if kind == "fitted" and fps and _producer(ledger, fps[0]) is not None:
        fitted_on = fps[0]  # what it learned from; unknown data is judged by its items below
    stats = {**(stats or {}), **_held_out(ledger, kind, result, parts, fitted_on, fps, first)}
    record = ledger.record(
        step, inputs=inputs, output=output, fitted_on=fitted_on, parts=parts, params=params, stats=stats
    )
    if reads is not None:
        _READS[ledger] = [*reads, (step, tuple(fps))]
    return record


def _held_out(
    ledger: StepLedger,
    kind: str,
    result: Any,
    parts: Mapping[str, str],
    fitted_on: str | None,
    fps: Sequence[str],
    first: Any,
) -> dict[str, Any]:
    """Item-hash stats: a split's held-out samples, or what of them an unknown fitted input held."""
    if parts and isinstance(result, (tuple, list)):
        samples = {n: held_out_sample(v) for n, v in zip(_PARTS, result) if n != "train"}
        return {"held_out_items": {n: s for n, s in samples.items() if s is not None}}
    if kind != "fitted" or fitted_on is not None or not fps:
        return {}
    split = next((r for r in reversed(ledger.records) if r.stats.get("held_out_items")), None)
    hashes = item_hashes(first) if split is not None else None
    if split is None or hashes is None:
        return {}
    seen = set(hashes)
    return {
        "held_out_seen": {
            n: [sum(h in seen for h in s["hashes"]), len(s["hashes"]), s["count"]]
            for n, s in split.stats["held_out_items"].items()
        }
    }


def _mapping(value: Any, what: str, step: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"record_step('{step}'): {what} must give a mapping, got {type(value).__name__}")
    return {str(k): v for k, v in value.items()}


def record_step(
    step: str,
    *,
    pipeline: Pipeline = STANDARD_PIPELINE,
    reads: Sequence[str] | str | None = None,
    params: Params = None,
    stats: Stats = None,
) -> Callable[[_F], _F]:
    """A method decorator: each call records ``step`` in ``self.ledger`` (see the module docstring).

    Examples:
        >>> class Prep:
        ...     @record_step("load")
        ...     def load(self):
        ...         return ["a", "b", "c", "d"]
        ...     @record_step("split")
        ...     def split(self, rows):
        ...         return rows[:3], rows[3:]
        >>> prep = Prep()
        >>> _ = prep.split(prep.load())
        >>> [(r.step, sorted(r.parts)) for r in prep.ledger]
        [('load', []), ('split', ['train', 'val'])]

    Args:
        step: the pipeline step the method performs.
        pipeline: the pipeline whose names are valid (pass the same one to ``OrderValidator``).
        reads: names of attributes of ``self`` the method reads besides its arguments (e.g.
            ``"train_rows"``); their content is fingerprinted like arguments, first.
        params: the parameters that shaped the step, recorded in ``params`` (part of the record's
            identity): a mapping, or a function of ``self`` called before the method runs (e.g.
            ``lambda self: {"eos": self.eos}``).
        stats: summary statistics recorded in ``stats`` (not hashed): a mapping, or a function of
            ``(self, result)`` called after the method returned (e.g. ``lambda self, blocks:
            {"eos_rate": float((blocks == 0).mean())}``).

    Raises:
        StepNameError: at decoration time, when ``step`` is no step of ``pipeline`` (an LM step
            name under the standard pipeline says to pass ``pipeline=LM_PIPELINE``).
    """
    check_step_names(pipeline, [step], where="record_step")
    attributes = (reads,) if isinstance(reads, str) else tuple(reads or ())

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            # What it read, fingerprinted before it runs (a step may change its input in place).
            read = [getattr(self, a) for a in attributes] + list(args) + [kwargs[k] for k in sorted(kwargs)]
            fps = [data_fingerprint(value) for value in read]
            shaped = _mapping(params(self) if callable(params) else params, "params", step)
            result = method(self, *args, **kwargs)
            summary = _mapping(stats(self, result) if callable(stats) else stats, "stats", step)
            _write(self, pipeline, step, fps, result, True, shaped, summary, read[0] if read else None)
            return result

        setattr(wrapper, _MARK, step)
        return wrapper  # type: ignore[return-value]

    return decorate


class StepRecording:
    """What a :func:`recording` block read and produced; set :attr:`output` before the block ends.

    Attributes:
        output: what the block produced (fingerprinted when the block ends).
        params: the parameters that shaped the step (fill it in the block).
        stats: summary statistics (fill it in the block).
        record: the :class:`~lightning_order.ledger.StepRecord` written, once the block ended.
    """

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        self.output: Any = None
        self.params: dict[str, Any] = dict(params or {})
        self.stats: dict[str, Any] = {}
        self.record: StepRecord | None = None


@contextlib.contextmanager
def recording(
    owner: Any,
    step: str,
    *,
    reads: Sequence[Any] = (),
    pipeline: Pipeline = STANDARD_PIPELINE,
    params: Mapping[str, Any] | None = None,
) -> Iterator[StepRecording]:
    """A block that records ``step`` in ``owner.ledger`` when it ends without an error.

    Examples:
        >>> class Prep: ...
        >>> prep, train = Prep(), [1.0, 2.0, 3.0]
        >>> with recording(prep, "fit_features", reads=[train]) as step:
        ...     step.output = {"mean": sum(train) / len(train)}
        >>> prep.ledger.steps()
        ['fit_features']

    Args:
        owner: the object whose ``ledger`` receives the record (usually ``self``).
        step: the pipeline step the block performs.
        reads: what the block read (the first is what a fitted step learned from).
        pipeline: the pipeline whose names are valid.
        params: the parameters that shaped the step (``step.params`` in the block adds to them);
            fill ``step.stats`` in the block for its summary statistics.

    Raises:
        StepNameError: when ``step`` is no step of ``pipeline`` (before the block runs).
    """
    check_step_names(pipeline, [step], where="recording")
    fps = [data_fingerprint(value) for value in reads]
    entry = StepRecording(params)
    yield entry
    entry.record = _write(
        owner,
        pipeline,
        step,
        fps,
        entry.output,
        has_result=entry.output is not None,
        params=_mapping(entry.params, "params", step),
        stats=_mapping(entry.stats, "stats", step),
        first=reads[0] if reads else None,
    )


def require_steps(
    *steps: str, step: str | None = None, pipeline: Pipeline | None = None
) -> Callable[[_F], _F]:
    """A method decorator: the method may run only after ``steps`` are done.

    A step counts as done when the instance has ``_<step>_done`` set, or when its ``ledger``
    (a :class:`StepLedger`) has a record of it. On success the decorator sets
    ``_<method>_done`` and, when the instance has a ledger and the method did not record itself,
    records the step with the latest outputs of ``steps`` as inputs.

    Examples:
        >>> class Prep:
        ...     @require_steps("clean")
        ...     def build_vocab(self): ...
        >>> Prep().build_vocab()
        Traceback (most recent call last):
        ...
        lightning_order.errors.OrderError: ...

    Args:
        *steps: the steps that must be done first.
        step: the name to record (default: the method's name).
        pipeline: the pipeline whose rule codes name the violation (default: the standard one).

    Raises:
        OrderError: when called before the named steps are done; the rule is the specific code
            where one exists (``vocab-before-clean`` for ``build_vocab`` before ``clean``), else
            ``missing-step``.
    """
    rules_from = pipeline or STANDARD_PIPELINE
    # The names share the pipeline's vocabulary with lightning_order.recording: a typo raises here.
    check_step_names(rules_from, [*steps, *([step] if step is not None else [])], where="require_steps")

    def decorate(method: _F) -> _F:
        name = step or method.__name__

        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            ledger = getattr(self, "ledger", None)
            ledger = ledger if isinstance(ledger, StepLedger) else None
            missing = [s for s in steps if not _is_done(self, ledger, s)]
            if missing:
                order = (
                    rules_from.expected_order_text(set(steps) | {name})
                    if name in rules_from
                    else " -> ".join((*steps, name))
                )
                raise OrderError(
                    [
                        Violation(
                            _rule_for_missing(rules_from, name, req),
                            (name, req),
                            f"{type(self).__name__}.{method.__name__}() was called before "
                            f"'{req}' was done; required order: {order}",
                        )
                        for req in missing
                    ]
                )
            before = len(ledger) if ledger is not None else 0
            result = method(self, *args, **kwargs)
            setattr(self, f"_{method.__name__}_done", True)
            if ledger is not None and len(ledger) == before:
                inputs = {s: (record.output if (record := ledger.latest(s)) else None) for s in steps}
                ledger.record(name, inputs=inputs)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def _is_done(instance: Any, ledger: StepLedger | None, step: str) -> bool:
    return bool(getattr(instance, f"_{step}_done", False)) or (ledger is not None and ledger.has(step))


def _rule_for_missing(pipeline: Pipeline, step: str, requirement: str) -> str:
    rule = pipeline.rule_for(step, requirement) if step in pipeline and requirement in pipeline else None
    return rule if rule not in (None, "out-of-order") else "missing-step"

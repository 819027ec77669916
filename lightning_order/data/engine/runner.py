"""The step machinery: data steps as registered plain functions, and one runner for every pipeline.

A data step is a plain function ``fn(ctx, state) -> StepResult``: it reads its parameters from
``ctx.config`` and the data from ``state`` (a :class:`DataState`), and returns the new state plus
what the ledger records (output fingerprint, parts, params, stats). It never touches the ledger,
the cache or the DataModule. It is registered, in the module that owns its maths, under its
pipeline step name, together with what makes an order *executable*::

    from lightning_order.data.engine.runner import ROWS, StepResult
    from lightning_order.data.text.registry import STEPS

    @STEPS.register("dedupe", takes=ROWS, reads="data", writes_data=True, config=("text_column",))
    def dedupe(ctx, state):
        data = state.data.filter(...)
        return StepResult(replace(state, data=data), output=ctx.fingerprint)

The declaration (:class:`StepSpec`):

- ``takes``: the data forms the step can run on (``None`` before anything is loaded, ``"rows"``,
  ``"encoded"``, ``"shard"``); ``makes``: the form it leaves (``None``: unchanged).
- ``uses``: state an earlier step must have left (``"parts"``, left by a step with
  ``partitions``; ``"tokenizer"``); ``provides``: state it leaves for later steps; ``fits``:
  state it learns from, which no later step may change.
- ``needs``: steps that must have run before it (they must be in the order);
  ``after``: steps that, when they are in the order, must run before it (for your own steps:
  the library's steps name none, their order is the pipeline's).
- ``consumes``: steps whose latest output becomes one of its recorded inputs;
  ``reads``: ``"data"`` (the current data version is an input), ``"train"`` (it learns from the
  train part: recorded as ``fitted_on``) or ``"none"``; ``writes_data``: its output is the new
  data version that later steps read; ``partitions``: the parts it splits the data into.
- ``per_rank``: it runs in ``setup`` on every rank; every step after it does too.
- ``config``: the config fields it reads. The runner hashes their values (as the cache key
  takes them: a file's content hash, not its path) with the step's name and recorded inputs
  into ``ctx.fingerprint`` (:func:`declared_fingerprint`), which the step's output is made
  from; so a field that shapes the data changes the fingerprints of exactly the steps that
  declare it, and of the steps that consume theirs, and no step lists its parameters by hand.
  ``output="content"``: the output is a content fingerprint of what the step made (a
  tokenizer's), which a declared field changes by changing the content.

:func:`check_executable` judges an order from these declarations alone; :func:`run_steps` runs
an order, computing every step's recorded inputs from what actually ran; :func:`plan` is the same
runner with ``dry=True``: the step bodies are skipped and outputs are placeholders, so the planned
ledger that the order check judges at construction has the lineage a real run records.

Another pipeline registers its own steps in its own :class:`StepRegistry` (``LM_STEPS =
StepRegistry()``), reusing functions of this one where they fit (``LM_STEPS.add(STEPS["clean"])``),
and calls the same runner: the runner is never edited to add a step.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lightning_order.data.engine.engines import errors_named, release_memory
from lightning_order.data.engine.registry import ROWS, StepRegistry, StepSpec, check_executable
from lightning_order.data.engine.storage import storage_errors
from lightning_order.errors import DataError, OrderError
from lightning_order.ledger import StepLedger, fingerprint

if TYPE_CHECKING:  # pragma: no cover - typing only
    from lightning_order.order import Pipeline

__all__ = [
    "POOL_ROWS",
    "ROWS",
    "DataState",
    "StepContext",
    "StepRegistry",
    "StepResult",
    "StepSpec",
    "check_executable",
    "declared_fingerprint",
    "declared_values",
    "initial_state",
    "map_kwargs",
    "plan",
    "resolve_order",
    "run_preparation",
    "run_steps",
    "split_phases",
    "train_data",
]

#: The fewest rows for which a row-wise ``Dataset.map`` starts ``num_proc`` worker processes.
POOL_ROWS = 20000


@dataclass(frozen=True)
class DataState:
    """What a pipeline holds between steps: plain data, replaced (not mutated) by each step.

    What every pipeline holds; a pipeline with more to carry subclasses it and names the subclass
    in its :class:`~lightning_order.data.engine.registry.StepRegistry` (``state=``), as the text
    pipeline does with its fitted statistics (:class:`~lightning_order.data.text.registry.TextState`).

    Attributes:
        data: the whole data, before the split.
        parts: the parts after the split (``train``, ``val``).
        form: ``None`` (nothing loaded), ``"rows"``, ``"encoded"`` or ``"shard"``.
        lineage: ``(step, fingerprint)`` of the current data version.
        part_fps: the fingerprint of each part's current version.
        tokenizer: the trained tokenizer.
        extra: anything else a pipeline's steps carry without a state class of its own.
    """

    data: Any = None
    parts: Mapping[str, Any] = field(default_factory=dict)
    form: str | None = None
    lineage: tuple[str, str] = ("", "")
    part_fps: Mapping[str, str] = field(default_factory=dict)
    tokenizer: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def rows(self) -> int:
        """The number of rows held (all parts together after the split)."""
        return sum(len(p) for p in self.parts.values()) if self.parts else len(self.data)


@dataclass(frozen=True)
class StepContext:
    """What a step function reads besides the state: the config and the inputs the runner computed.

    Attributes:
        config: the pipeline's config (for the DataModule, a :class:`~.config.DataConfig`).
        inputs: the recorded inputs (fingerprints by producing step) of this run of the step.
        fitted_on: for ``reads="train"`` steps, the fingerprint of the data it learns from.
        work: a scratch folder (``None`` in ``setup``).
        hooks: picklable batch functions the owner supplies (e.g. overridden ``clean``).
        feature_names: the columns of the ``features`` vector.
        rank: this process's rank (``setup``) and ``world_size``.
        engine: where per-partition work runs (:mod:`.engines`); ``None``: this process.
        fingerprint: the runner's hash of the step's name, recorded inputs and declared config
            fields (:func:`declared_fingerprint`): what the step's output fingerprint is made from.
    """

    config: Any
    inputs: Mapping[str, str] = field(default_factory=dict)
    fitted_on: str | None = None
    work: Path | None = None
    hooks: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    feature_names: tuple[str, ...] = ()
    rank: int = 0
    world_size: int = 1
    engine: Any = None
    fingerprint: str = ""


@dataclass(frozen=True)
class StepResult:
    """A step function's return: the new state and what the ledger records of the step.

    ``learned=False`` tells a ``reads="train"`` step's record that, this time, it learned
    nothing from the data (e.g. a tokenizer supplied as a file): no ``fitted_on`` is recorded.
    """

    state: DataState
    output: str
    parts: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)
    learned: bool = True


StepFn = Callable[[StepContext, DataState], StepResult]


def resolve_order(
    order: Sequence[str] | str | None,
    registry: StepRegistry,
    pipeline: Pipeline,
    config: Any,
    *,
    enforce: bool,
    final: str | None,
    owner: str = "OrderedDataModule",
) -> tuple[str, ...]:
    """The order to run: ``pipeline``'s data steps, or ``order`` once checked.

    Args:
        order: ``None`` (the pipeline's order of its registered steps), step names, or one
            string (``"load, clean, ..."`` or ``"load -> clean -> ..."``).
        registry: where the steps are declared.
        pipeline: the mandated order, which judges a dry run (:func:`plan`) of ``order``.
        config: passed to the dry run.
        enforce: refuse an order that breaks the pipeline's rules.
        final: the data form the order must end with.
        owner: named in the error's header.

    Raises:
        DataError: the order cannot run at all (an unknown step, a step on data of the wrong
            form, a missing prerequisite), whatever ``enforce`` says.
        OrderError: ``enforce`` and the pipeline finds violations (with their rule codes).
    """
    mandated = tuple(pipeline.subset(registry))
    if order is None:
        steps = mandated
    elif isinstance(order, str):
        steps = tuple(s.strip() for s in order.replace("->", ",").split(",") if s.strip())
    else:
        steps = tuple(order)
    problems = [(s, f"'{s}' is no data step of this pipeline") for s in steps if s not in mandated]
    problems = problems or check_executable(steps, registry, final=final)
    if problems:
        raise DataError(
            f"order {list(steps)} cannot be executed, even with enforce=False: "
            + "; ".join(p for _, p in problems)
            + f". The data steps, in the mandated order: {', '.join(mandated)}",
            step=problems[0][0] or None,
        )
    if steps != mandated and enforce:
        violations = pipeline.check(plan(steps, registry, config))
        if violations:
            raise OrderError(
                violations,
                header=f"{owner}(order={list(steps)}) breaks the mandated order "
                f"({' -> '.join(mandated)}); pass enforce=False to run it anyway (for experiments):",
            )
    return steps


def split_phases(order: Sequence[str], registry: StepRegistry) -> tuple[list[str], list[str]]:
    """``order`` cut at its first ``per_rank`` step: ``(prepare_data steps, setup steps)``."""
    cut = next((i for i, s in enumerate(order) if registry[s].per_rank), len(order))
    return list(order[:cut]), list(order[cut:])


def _lineage(spec: StepSpec, state: DataState, ledger: StepLedger) -> tuple[dict[str, str], str | None]:
    """The inputs a step records, from what actually ran (the ledger and the state's lineage)."""
    # A record the runner wrote always has its output (recorded steps' outputs are never None).
    inputs = {s: cast(str, r.output) for s in spec.consumes if (r := ledger.latest(s)) is not None}
    fitted_on = None
    if spec.reads == "data" and state.lineage[0]:
        inputs.setdefault(*state.lineage)
    elif spec.reads == "train":
        split = ledger.latest("split")
        if state.form != "shard" and state.parts and split is not None:
            source = ("split", split.parts["train"])
        else:
            source = state.lineage
        inputs[source[0]] = source[1]
        fitted_on = source[1]
    return inputs, fitted_on


def declared_values(config: Any, names: Sequence[str], step: str = "") -> dict[str, Any]:
    """The values of the config fields ``names`` as they shape the data (what the cache key takes).

    A field declared with a value of its own (``shapes(value=...)``: the input files' identity, a
    tokenizer's content hash) enters as that value, so an edited file changes it and a moved one
    does not; one declared to shape the data only in some configs (``shapes(when=...)``) is left
    out of the others, as the cache key leaves it out.

    Args:
        config: the pipeline's config (a dataclass, whose fields' metadata says how they enter).
        names: the fields a step declares (:attr:`StepSpec.config`).
        step: the step's name, for the error.

    Raises:
        DataError: ``step`` declares a field the config does not have.
    """
    meta: dict[str, Mapping[str, Any]] = (
        {f.name: f.metadata for f in fields(config)} if is_dataclass(config) else {}
    )
    out: dict[str, Any] = {}
    for name in names:
        if not hasattr(config, name):
            raise DataError(
                f"step '{step}' declares the config field {name!r}, which {type(config).__name__} does not "
                "have; declare the fields the step reads (StepSpec config=...)",
                step=step or None,
            )
        info: Mapping[str, Any] = meta.get(name, {})
        if "when" in info and not info["when"](config):
            continue
        out[name] = info["value"](config) if "value" in info else getattr(config, name)
    return out


def declared_fingerprint(spec: StepSpec, config: Any, inputs: Mapping[str, str]) -> str:
    """What ``spec``'s step fingerprint is made from: its name, recorded inputs and declared config fields."""
    return fingerprint("step", spec.name, dict(inputs), declared_values(config, spec.config, spec.name))


def _placeholder(ctx: StepContext, state: DataState, spec: StepSpec) -> StepResult:
    """A dry run's stand-in for a step body: the declared fingerprint, and empty parts."""
    output = fingerprint("plan", ctx.fingerprint)
    if not spec.partitions:
        return StepResult(state, output)
    parts = {name: fingerprint(output, name) for name in spec.partitions}
    return StepResult(replace(state, data=None, parts=dict.fromkeys(spec.partitions)), output, parts=parts)


def run_steps(
    order: Iterable[str],
    registry: StepRegistry,
    ctx: StepContext,
    state: DataState,
    ledger: StepLedger,
    dry: bool = False,
) -> DataState:
    """Runs ``order`` on ``state``, recording each step in ``ledger``; returns the final state.

    Args:
        order: the step names to run, in order.
        registry: where the step functions are registered.
        ctx: the config and hooks (the runner fills in ``inputs`` and ``fitted_on``).
        state: the state to start from.
        ledger: receives one record per step.
        dry: skip the step bodies (outputs are placeholders): the planned ledger.
    """
    for name in order:
        spec = registry[name]
        inputs, fitted_on = _lineage(spec, state, ledger)
        declared = declared_fingerprint(spec, ctx.config, inputs)
        step_ctx = replace(ctx, inputs=inputs, fitted_on=fitted_on, fingerprint=declared)
        start = time.perf_counter()
        result = _placeholder(step_ctx, state, spec) if dry else _run_one(spec, step_ctx, state)
        # The step's own time (stats are never part of a fingerprint): the ledger's time breakdown.
        seconds = {} if dry else {"seconds": round(time.perf_counter() - start, 4)}
        record = ledger.record(
            name,
            inputs=inputs,
            output=result.output,
            fitted_on=fitted_on if result.learned else None,
            parts=result.parts,
            params=result.params,
            stats={**result.stats, **seconds},
        )
        state = replace(result.state, form=spec.makes or result.state.form)
        if spec.writes_data:
            state = replace(state, lineage=(name, cast(str, record.output)))
    return state


def _run_one(spec: StepSpec, ctx: StepContext, state: DataState) -> StepResult:
    """Runs a step body, then hands what it freed back to the system; a full disk or a denied write inside it becomes a DataError naming the step."""
    with storage_errors(spec.name, ctx.work), errors_named(spec.name):
        try:
            return spec.fn(ctx, state)
        finally:
            release_memory()


def run_preparation(
    folder: Path,
    ctx: StepContext,
    order: Sequence[str],
    registry: StepRegistry,
    info: Mapping[str, Any],
    write: Callable[[DataState, StepLedger], None],
) -> None:
    """Runs the steps of ``order`` before the first per-rank one, then ``write(state, ledger)`` into ``folder``.

    The steps get a scratch folder, ``folder/work``, removed once ``write`` has moved out what it
    keeps. The ledger's ``info`` holds ``info`` plus the order and the per-rank steps.

    Args:
        folder: the (temporary) cache folder being prepared.
        ctx: the config and hooks (``work`` is set here).
        order: the data steps, in order.
        registry: where they are registered.
        info: what the manifest records besides the order (``cache_key``, ``pipeline``, ``config``...).
        write: writes the prepared files and the manifest (last).
    """
    work = folder / "work"
    work.mkdir()
    steps, per_rank = split_phases(order, registry)
    ledger = StepLedger(info={**info, "order": list(order), "per_rank_steps": per_rank})
    state = run_steps(steps, registry, replace(ctx, work=work), initial_state(registry), ledger)
    write(state, ledger)
    shutil.rmtree(work, ignore_errors=True)


def plan(order: Sequence[str], registry: StepRegistry, config: Any) -> StepLedger:
    """The ledger running ``order`` would leave, from :func:`run_steps` with ``dry=True``."""
    ledger = StepLedger()
    run_steps(order, registry, StepContext(config), initial_state(registry), ledger, dry=True)
    return ledger


def initial_state(registry: StepRegistry) -> DataState:
    """The empty state a preparation starts from: the registry's pipeline's own state class."""
    return (registry.state or DataState)()


def train_data(state: DataState) -> Any:
    """The data a fitted step learns from: the train part (or shard), or all rows before the split."""
    return state.parts["train"] if state.parts else state.data


def map_kwargs(config: Any, fp: str, rows: int = POOL_ROWS) -> dict[str, Any]:
    """The ``Dataset.map`` arguments of a batched step (``num_proc`` and the new fingerprint).

    Worker processes are used only for ``rows`` of at least :data:`POOL_ROWS` (below that,
    starting them costs more than they save).
    """
    procs = config.num_proc if config.num_proc > 1 and rows >= POOL_ROWS else None
    return {"batched": True, "batch_size": 1000, "num_proc": procs, "new_fingerprint": fp[:32]}


def apply_rowwise(
    config: Any, state: DataState, fp: str, function: Callable[..., Any], **kwargs: Any
) -> DataState:
    """Applies a batched row-wise function to the whole data, or to each part (fingerprints per part)."""
    if state.parts:
        parts, part_fps = {}, {}
        for name, part in state.parts.items():
            part_fps[name] = fingerprint(fp, name)
            parts[name] = part.map(function, **map_kwargs(config, part_fps[name], len(part)), **kwargs)
        return replace(state, parts=parts, part_fps=part_fps)
    return replace(state, data=state.data.map(function, **map_kwargs(config, fp, len(state.data)), **kwargs))

"""The step registry: each data step's function and declarations, bound to the pipeline that orders it.

A :class:`StepRegistry` is made for one :class:`~lightning_order.order.Pipeline` (the text
registry for :data:`~lightning_order.STANDARD_PIPELINE`, the LM one for
:data:`~lightning_order.LM_PIPELINE`): the pipeline is the one declaration of each step's name,
kind and requirements, and the registry's data steps are read from it in its order
(:meth:`StepRegistry.data_steps`). A registration declares what the pipeline cannot say, about
the data rather than about other steps (:class:`StepSpec`): the data forms it takes and makes,
the state it ``provides`` (``"tokenizer"``; a step with ``partitions`` provides ``"parts"``) and
the state it ``uses`` and the state it ``fits`` (learns from, so no later step may change it),
whose outputs it ``consumes`` as recorded inputs, and the ``config`` fields it reads (the
runner hashes exactly those into its fingerprint: :func:`~.runner.declared_fingerprint`). That is
enough to judge
an order the user asks for with ``enforce=False``: no step of the library names another step to
say it must come first (the pipeline says that, once). ``needs`` and ``after`` (step names that
must or, when present, must run first) remain for users' own steps; any step a registration
names must be one the pipeline orders before it, or the registration is refused when it is made.

:func:`check_executable` judges an order from these declarations alone (see
:mod:`lightning_order.data.engine.runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from lightning_order.errors import DataError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from lightning_order.data.engine.runner import DataState, StepFn
    from lightning_order.order import Pipeline

__all__ = ["ROWS", "StepRegistry", "StepSpec", "check_executable"]

#: The form of the data before it is encoded (one row per example, original columns).
ROWS = frozenset({"rows"})


@dataclass(frozen=True)
class StepSpec:
    """A registered step: its function and the declarations the runner and the checker read.

    ``takes`` is the set of data forms the step runs on; one form (``"rows"``) or ``None``
    (nothing loaded yet: a source step) may be given alone and is read as the set of it.

    ``config`` names the config fields the step reads (what it does depends on no other field
    that shapes the data); the runner hashes their values with the step's inputs into
    ``StepContext.fingerprint``. ``output`` says what the step records as its output: a
    fingerprint made from ``ctx.fingerprint`` (``"declared"``: a declared field changes it), or
    a content fingerprint of what it made (``"content"``: a tokenizer's, statistics'; a declared
    field changes it only by changing that content, and the validator compares it with the
    object in use).
    """

    name: str
    fn: StepFn
    takes: frozenset[str | None] = ROWS
    makes: str | None = None
    uses: tuple[str, ...] = ()
    fits: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    consumes: tuple[str, ...] = ()
    reads: Literal["data", "train", "none"] = "data"
    writes_data: bool = False
    partitions: tuple[str, ...] = ()
    per_rank: bool = False
    config: tuple[str, ...] = ()
    output: Literal["declared", "content"] = "declared"

    def __post_init__(self) -> None:
        # One form (or None, for a source) is the set of it: a bare string would be read as its letters.
        if self.takes is None or isinstance(self.takes, str):
            object.__setattr__(self, "takes", frozenset({self.takes}))
        elif not isinstance(self.takes, frozenset):
            object.__setattr__(self, "takes", frozenset(self.takes))


class StepRegistry:
    """Step functions by pipeline step name, bound to the pipeline that orders them.

    Args:
        pipeline: the pipeline whose data steps these are (``None``: a registry of loose steps,
            in registration order, whose declarations are not checked against an order).
        state: the state its steps pass on (a subclass of
            :class:`~lightning_order.data.engine.runner.DataState` with the pipeline's own fields,
            e.g. the text pipeline's fitted statistics); ``None``: ``DataState`` itself. A
            preparation starts from ``state()``.
    """

    def __init__(self, pipeline: Pipeline | None = None, state: type[DataState] | None = None) -> None:
        self._specs: dict[str, StepSpec] = {}
        self.pipeline = pipeline
        self.state = state

    def data_steps(self) -> tuple[str, ...]:
        """The registered steps of the pipeline, in its order (registration order when unbound)."""
        return tuple(self._specs) if self.pipeline is None else tuple(self.pipeline.subset(self._specs))

    def register(self, name: str, **declared: Any) -> Callable[[StepFn], StepFn]:
        """A decorator registering ``fn`` as step ``name`` with the :class:`StepSpec` fields ``declared``.

        Examples:
            >>> @STEPS.register("load", takes=None, makes="rows", reads="none", writes_data=True)  # doctest: +SKIP
            ... def load(ctx: StepContext, state: DataState) -> StepResult: ...
        """

        def decorate(fn: StepFn) -> StepFn:
            self.add(StepSpec(name, fn, **declared))
            return fn

        return decorate

    def add(self, spec: StepSpec) -> None:
        """Registers ``spec``; a name registered twice with another function is refused, so is a
        declaration naming a step the pipeline does not order before it."""
        self._check_order(spec)
        old = self._specs.get(spec.name)
        if old is not None and old.fn is not spec.fn:
            raise DataError(
                f"two functions are registered as step '{spec.name}' ({old.fn.__qualname__} and "
                f"{spec.fn.__qualname__}); give the new step another name",
                step=spec.name,
            )
        self._specs[spec.name] = spec

    def _check_order(self, spec: StepSpec) -> None:
        # The pipeline declares the requirements; a registration only refers to them.
        if self.pipeline is None or spec.name not in self.pipeline:
            return  # a step of your own, ordered by the pipeline you extend
        before = self.pipeline.ancestors(spec.name)
        for field in ("needs", "after", "consumes"):
            wrong = [n for n in getattr(spec, field) if n not in before]
            if wrong:
                raise DataError(
                    f"step '{spec.name}' is registered with {field}={tuple(getattr(spec, field))}, but the "
                    f"pipeline does not order {', '.join(repr(n) for n in wrong)} before it (its requirements: "
                    f"{', '.join(sorted(before)) or 'none'}); declare the order once, in the Pipeline",
                    step=spec.name,
                )

    def replace(self, name: str, fn: StepFn) -> StepSpec:
        """Runs ``fn`` for the registered step ``name`` from now on (same declarations); returns the old spec."""
        old = self._specs[name]
        self._specs[name] = replace(old, fn=fn)
        return old

    def __getitem__(self, name: str) -> StepSpec:
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)


def provided(spec: StepSpec) -> tuple[str, ...]:
    """The state ``spec``'s step leaves for later steps: its ``provides``, and ``"parts"`` if it splits."""
    return (*spec.provides, *(("parts",) if spec.partitions else ()))


def _makers(registry: StepRegistry, what: str) -> str:
    makers = [name for name in registry if what in provided(registry[name])]
    return " or ".join(f"'{m}'" for m in makers) or "no registered step"


def check_executable(
    order: Sequence[str], registry: StepRegistry, final: str | None
) -> list[tuple[str, str]]:
    """What makes ``order`` impossible to run at all, judged from the steps' declarations only.

    Args:
        order: step names, in the order they would run.
        registry: where the steps are declared.
        final: the data form the order must end with (e.g. ``"shard"``).

    Returns:
        ``(step, problem)`` for each broken declaration; empty when the order can run.
    """
    problems = [(s, f"'{s}' is no registered step") for s in order if s not in registry]
    if problems:
        return problems
    form: str | None = None
    ran: list[str] = []
    made: set[str] = set()
    fitted: dict[str, str] = {}  # state -> the step that learnt from it
    for name in order:
        spec = registry[name]
        if name in ran:
            problems.append((name, f"'{name}' is named twice"))
        if form not in spec.takes:
            wanted = " or ".join(sorted(str(t) for t in spec.takes))
            problems.append((name, f"'{name}' runs on {wanted} data, but the data is {form} at that point"))
        problems += [
            (name, f"'{name}' uses the {what} that {_makers(registry, what)} makes: run it before '{name}'")
            for what in spec.uses
            if what not in made
        ]
        problems += [
            (
                name,
                f"'{name}' changes the {what} that '{fitted[what]}' learnt from: run it before '{fitted[what]}'",
            )
            for what in provided(spec)
            if what in fitted
        ]
        made.update(provided(spec))
        fitted.update(dict.fromkeys(spec.fits, name))
        problems += [(name, f"'{name}' needs '{n}' to run before it") for n in spec.needs if n not in ran]
        problems += [
            (name, f"'{a}' must run before '{name}'") for a in spec.after if a in order and a not in ran
        ]
        form = spec.makes or form
        ran.append(name)
    if form != final:
        problems.append((order[-1] if order else "", f"the order must end with {final} data, not {form}"))
    return problems

"""The mandated order of data preparation and model set-up, as data, and the engine that checks it.

A :class:`Pipeline` is a DAG of :class:`Step` s, validated when it is built (no cycle, no
requirement that names no step). :meth:`Pipeline.check` judges a :class:`~lightning_order.ledger.
StepLedger` (what really ran) against the DAG and returns every :class:`Violation` with a stable
rule code. It judges the ledger so far: a step that has not happened yet is no violation. The
latest record of each step is the one judged, so a step re-run correctly clears its old mistake,
and a step re-run upstream makes what consumed its old output ``stale-input``.

:data:`STANDARD_PIPELINE` is the mandated order (docs/data.md, "The steps"), stated once; everything else reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from lightning_order.errors import OrderError, OrderWarning
from lightning_order.judge import judge
from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.rules import RULES, Violation

# RULES and Violation live in lightning_order.rules (a leaf module); the errors in errors.py.
__all__ = ["KINDS", "LM_PIPELINE", "STANDARD_PIPELINE", "Pipeline", "Step"]

StepKind = Literal["source", "rowwise", "partition", "fitted", "apply", "model", "loop"]
KINDS: tuple[str, ...] = get_args(StepKind)


@dataclass(frozen=True)
class Step:
    """One step of a pipeline.

    Args:
        name: the step's name, unique in its pipeline.
        requires: the names of the steps that must run before it.
        kind: ``source`` (produces data), ``rowwise`` (one example at a time), ``partition``
            (splits the data), ``fitted`` (learns from many examples: must come after the split
            and learn from the train split only), ``apply`` (applies fitted state), ``model``
            or ``loop``.
        description: a line for tables and graphs.
    """

    name: str
    requires: tuple[str, ...] = ()
    kind: StepKind = "rowwise"
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Step name must be a non-empty string, got {self.name!r}")
        if isinstance(self.requires, str):
            object.__setattr__(self, "requires", (self.requires,))
        else:
            object.__setattr__(self, "requires", tuple(self.requires))
        if self.kind not in KINDS:
            raise ValueError(f"Step '{self.name}' has kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.name in self.requires:
            raise OrderError([Violation("cycle", (self.name,), f"step '{self.name}' requires itself")])


# Where running a step before one of its (transitive) requirements has a name of its own.
_SPECIFIC_BY_NAME: dict[tuple[str, str], str] = {("build_vocab", "clean"): "vocab-before-clean"}
_SPECIFIC_BY_KIND: dict[tuple[str, str], str] = {
    ("fitted", "partition"): "fit-before-split",  # learned before the split: saw validation rows
    ("partition", "fitted"): "shard-before-normalize",  # sharded before the statistics existed
    ("model", "apply"): "init-before-data",  # the model was built before the data was encoded
    ("model", "fitted"): "init-before-data",
}


class Pipeline:
    """A DAG of steps, checked when it is built.

    Args:
        steps: the steps; their ``requires`` must name steps of this pipeline.
        rules: ``{(step, prerequisite): rule code}`` of this pipeline, before the general ones.

    Raises:
        OrderError: rule ``cycle`` (with the cycle's path), ``missing-step`` (a requirement
            that names no step) or ``duplicate-step`` (two steps with one name).
    """

    def __init__(self, steps: Iterable[Step], rules: Mapping[tuple[str, str], str] | None = None) -> None:
        self._steps: dict[str, Step] = {}
        self.rules: dict[tuple[str, str], str] = dict(rules or {})
        if any(code not in RULES for code in self.rules.values()):
            raise ValueError(f"Pipeline(rules=...) names unknown rule codes {sorted(self.rules.values())}")
        for step in steps:
            if not isinstance(step, Step):
                raise TypeError(f"Pipeline takes Step objects, got {type(step).__name__}: {step!r}")
            if step.name in self._steps:
                raise OrderError(
                    [
                        Violation(
                            "duplicate-step",
                            (step.name,),
                            f"Pipeline has two steps named '{step.name}' "
                            f"({self._steps[step.name]!r} and {step!r})",
                        )
                    ],
                    header="the pipeline declares a step twice:",
                )
            self._steps[step.name] = step
        self._validate()
        self._order = self._topological_order()
        self._ancestors = {name: self._collect_ancestors(name) for name in self._steps}

    # -- construction ----------------------------------------------------------------------
    def _validate(self) -> None:
        unknown = [
            Violation(
                "missing-step",
                (step.name, req),
                f"step '{step.name}' requires '{req}', which is no step of this pipeline "
                f"(steps: {', '.join(self._steps)})",
            )
            for step in self._steps.values()
            for req in step.requires
            if req not in self._steps
        ]
        if unknown:
            raise OrderError(unknown, header="the pipeline names a step it does not have:")
        cycle = self._find_cycle()
        if cycle:
            raise OrderError(
                [
                    Violation(
                        "cycle",
                        tuple(cycle),
                        f"the requirements form a cycle (each requires the next): {' -> '.join(cycle)}",
                    )
                ],
                header="the pipeline cannot run in any order:",
            )

    def _find_cycle(self) -> list[str] | None:
        white, grey, black = 0, 1, 2
        colour = dict.fromkeys(self._steps, white)
        stack: list[str] = []

        def visit(name: str) -> list[str] | None:
            colour[name] = grey
            stack.append(name)
            for req in self._steps[name].requires:
                if colour[req] == grey:
                    # The requirement chain from req back to req: each step requires the next.
                    return [*stack[stack.index(req) :], req]
                if colour[req] == white:
                    found = visit(req)
                    if found:
                        return found
            stack.pop()
            colour[name] = black
            return None

        for name in self._steps:
            if colour[name] == white:
                found = visit(name)
                if found:
                    return found
        return None

    def _topological_order(self) -> list[str]:
        # Kahn's algorithm, ties broken by declaration order so the order is stable and readable.
        position = {name: i for i, name in enumerate(self._steps)}
        pending = {name: set(step.requires) for name, step in self._steps.items()}
        order: list[str] = []
        while pending:
            ready = sorted((n for n, reqs in pending.items() if not reqs), key=position.__getitem__)
            name = ready[0]
            order.append(name)
            del pending[name]
            for reqs in pending.values():
                reqs.discard(name)
        return order

    def _collect_ancestors(self, name: str) -> frozenset[str]:
        seen: set[str] = set()
        todo = list(self._steps[name].requires)
        while todo:
            req = todo.pop()
            if req not in seen:
                seen.add(req)
                todo.extend(self._steps[req].requires)
        return frozenset(seen)

    def extend(self, *steps: Step, before: str | Sequence[str] = ()) -> Pipeline:
        """A new pipeline with user steps added (this one is left unchanged).

        A step whose name already exists replaces it. ``before`` names existing steps that must
        now also require the new steps.

        Examples:
            >>> dedupe = Step("dedupe", requires=("clean",), kind="rowwise")
            >>> pipeline = STANDARD_PIPELINE.extend(dedupe, before="split")
            >>> pipeline.order().index("dedupe") < pipeline.order().index("split")
            True

        Args:
            *steps: the steps to add or replace.
            before: steps that must run after the new ones.
        """
        targets = (before,) if isinstance(before, str) else tuple(before)
        new_names = tuple(s.name for s in steps)
        merged = dict(self._steps)
        for step in steps:
            merged[step.name] = step
        for target in targets:
            if target not in merged:
                raise OrderError(
                    [Violation("missing-step", (target,), f"extend(before='{target}'): no such step")]
                )
            old = merged[target]
            extra = tuple(n for n in new_names if n not in old.requires and n != target)
            merged[target] = Step(old.name, old.requires + extra, old.kind, old.description)
        return Pipeline(merged.values(), rules=self.rules)

    # -- reading ---------------------------------------------------------------------------
    @property
    def steps(self) -> dict[str, Step]:
        """The steps by name (a copy)."""
        return dict(self._steps)

    def __getitem__(self, name: str) -> Step:
        return self._steps[name]

    def __contains__(self, name: object) -> bool:
        return name in self._steps

    def __iter__(self) -> Iterator[Step]:
        return (self._steps[name] for name in self._order)

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(self._order)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pipeline) and self._steps == other._steps

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._steps.items())))

    def order(self) -> list[str]:
        """A topological order of the steps (ties broken by declaration order)."""
        return list(self._order)

    def ancestors(self, name: str) -> frozenset[str]:
        """Every step that must run before ``name`` (requirements, transitively)."""
        return self._ancestors[name]

    def descendants(self, name: str) -> frozenset[str]:
        """Every step that must run after ``name``."""
        return frozenset(n for n, anc in self._ancestors.items() if name in anc)

    def subset(self, names: Iterable[str]) -> list[str]:
        """``names`` sorted in this pipeline's order (names of no step are left out)."""
        wanted = set(names)
        return [n for n in self._order if n in wanted]

    def rule_for(self, step: str, prerequisite: str) -> str:
        """The rule code for running ``step`` before its prerequisite ``prerequisite``."""
        specific = self.rules.get((step, prerequisite)) or _SPECIFIC_BY_NAME.get((step, prerequisite))
        if specific is None and step in self._steps and prerequisite in self._steps:
            kinds = (self._steps[step].kind, self._steps[prerequisite].kind)
            specific = _SPECIFIC_BY_KIND.get(kinds)
        return specific or "out-of-order"

    def expected_order_text(self, names: Iterable[str] | None = None) -> str:
        """The order as ``a -> b -> c`` (all steps, or just ``names``)."""
        return " -> ".join(self._order if names is None else self.subset(names))

    # -- checking --------------------------------------------------------------------------
    def check(self, ledger: StepLedger | Iterable[StepRecord]) -> list[Violation]:
        """Judges what ran against this DAG.

        Only the latest record of each step is judged; steps that have not run yet are no
        violation. Records of steps this pipeline does not know are ignored.

        Args:
            ledger: a :class:`StepLedger` or its records.

        Returns:
            Every violation found, in ledger order, without duplicates.
        """
        return judge(self, ledger)

    def validate(
        self, ledger: StepLedger | Iterable[StepRecord], on_violation: str = "raise"
    ) -> list[Violation]:
        """Runs :meth:`check` and raises :class:`OrderError` (or warns) when anything is wrong.

        Args:
            ledger: what ran.
            on_violation: ``"raise"`` or ``"warn"`` (an :class:`OrderWarning`).

        Returns:
            The violations (empty when the ledger is clean).
        """
        if on_violation not in ("raise", "warn"):
            raise ValueError(f"on_violation must be 'raise' or 'warn', got {on_violation!r}")
        violations = self.check(ledger)
        if violations:
            error = OrderError(violations)
            if on_violation == "raise":
                raise error
            import warnings

            warnings.warn(str(error), OrderWarning, stacklevel=2)
        return violations


#: The mandated order of the classification pipeline (docs/data.md, "The steps").
STANDARD_PIPELINE = Pipeline(
    [
        Step("load", (), "source", "read the raw data"),
        Step("clean", ("load",), "rowwise", "normalise text: unicode, markup, '##', whitespace"),
        Step("engineer_features", ("clean",), "rowwise", "stateless per-example features"),
        Step("split", ("clean", "engineer_features"), "partition", "train/validation by key hash"),
        Step("fit_features", ("split",), "fitted", "standardisation statistics, train only"),
        Step("build_vocab", ("clean", "split"), "fitted", "tokenizer vocabulary, train only"),
        Step("encode", ("fit_features", "build_vocab"), "apply", "token ids, scaled features"),
        Step("shard", ("encode",), "partition", "one equal-length shard per rank"),
        Step("init_model", ("encode",), "model", "build the model from the data's dims"),
        Step("configure_optimizers", ("init_model",), "model", "optimizer over the parameters"),
        Step("train", ("shard", "configure_optimizers"), "loop", "the training loop"),
        Step("evaluate", ("train",), "loop", "validation and test"),
    ]
)

LM_PIPELINE = Pipeline(  # causal language modelling, docs/lm.md (OrderedLMDataModule)
    [
        Step("clean", ("load",), "rowwise", "normalise each document; drop the empty ones"),
        Step("dedup", ("clean",), "rowwise", "exact and MinHash near-duplicates, on the whole corpus"),
        Step("split", ("clean", "dedup"), "partition", "train/validation by document hash"),
        Step("build_vocab", ("clean", "split"), "fitted", "byte-level BPE, special tokens; train only"),
        Step("encode", ("build_vocab",), "apply", "token ids, one end-of-text after each document"),
        Step("pack", ("encode",), "apply", "blocks of block_size + 1 tokens, no padding"),
        Step("shard", ("pack",), "partition", "the same number of blocks on every rank"),
        Step("init_model", ("pack",), "model", "build the model from the data's dims"),
        *(STANDARD_PIPELINE[name] for name in ("load", "configure_optimizers", "train", "evaluate")),
    ],
    rules={
        ("split", "dedup"): "dedup-after-split",
        ("init_model", "build_vocab"): "vocab-changed-after-init",
    },
)

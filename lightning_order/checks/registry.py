"""The check registry: every check the validator runs, with the evidence it reads and when it runs.

A check is a :class:`Check`: a name, the phases of a run it runs in (:class:`Phase`), the kinds
of evidence it reads (:class:`EvidenceKind`), the rule codes it may report, and its judge, a pure
function of a :class:`CheckEvidence` that returns :class:`~lightning_order.rules.Violation` s.
A check whose evidence is not among what the validator gathers for every check (the ledger,
sampled rows, the model's dims, the checkpoint) also names a ``gather``: what it reads on this
rank, called by the validator with the Trainer, its result handed to the judge as
:attr:`CheckEvidence.gathered` (and, for a check that reads ``ranks``, every rank's result as
:attr:`CheckEvidence.ranks`, in rank order).

``OrderValidator`` gathers each phase's evidence once and runs what is registered for the phase;
the verdict is agreed across ranks in one all-gather per phase. So a check is registered on
every rank alike (at import time, as the built-in checks are): a ``gather`` that is a collective
runs in registration order on every rank, and a check registered on one rank only would leave
the others waiting.

Adding a check is one module, one :func:`register_check` call and its test; a check of a user's
own (outside this package) declares its rule codes with it (:class:`~lightning_order.rules.Rule`),
added to :data:`~lightning_order.rules.RULES` while it is registered.

A leaf of the package: it imports only :mod:`lightning_order.rules`, so a pipeline's spec, the
validator and the monitor may all import it without an import circle. Other callbacks read what
a validator found through :class:`CheckReport`, never through the validator's class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from lightning_order.rules import RULES, Rule, Violation

__all__ = [
    "Check",
    "CheckEvidence",
    "CheckReport",
    "EvidenceKind",
    "Phase",
    "USER_ORDER",
    "check_named",
    "register_check",
    "registered_checks",
    "unregister_check",
]


class Phase(str, Enum):
    """When a check runs: the moments of a run at which the validator gathers evidence and judges."""

    #: After the datamodule's ``setup``, on every rank: the ledger, sampled rows, the ranks' data.
    SETUP = "setup"
    #: A checkpoint's file, before any weight of it is restored.
    RESUME = "resume"
    #: After the model is built (and its weights restored): ``on_fit_start``, or the start of
    #: ``validate``/``test``.
    FIT_START = "fit-start"
    #: The train loader restored and no batch drawn yet (``on_train_start``).
    TRAIN_START = "train-start"
    #: During the first training step, before its optimizer step (the step-1 observation).
    STEP_ONE = "step-one"


class EvidenceKind(str, Enum):
    """What a check reads; the validator hands a check only the kinds it declares."""

    #: The datamodule's records: its ledger, the pipeline that judges it, its fingerprints and dims.
    LEDGER = "ledger"
    #: Rows sampled from the loaders before step 1 (the train batch, the splits' content summary,
    #: the dims they show).
    SAMPLES = "samples"
    #: The dims the model was built for (its ``hparams``, its token embedding, its input layer).
    MODEL = "model"
    #: What a checkpoint being resumed holds (its data fingerprints, content sample, position, ...).
    CHECKPOINT = "checkpoint"
    #: Every rank's result of the check's ``gather``, in rank order (one all-gather per phase).
    RANKS = "ranks"
    #: What the model received and was trained against in the first training step.
    STEP_ONE = "step-one"


@dataclass(frozen=True)
class CheckEvidence:
    """What a judge reads: plain data the validator gathered for the phase.

    Only the kinds a check declares are filled in; the others are left empty (``None``, ``{}``
    or ``()``), so a judge that reads what it did not declare finds nothing.

    Attributes:
        phase: the phase being judged.
        world_size: the number of processes of the run.
        settings: the validator's settings (``sample_rows``, ``overlap_max_rows``, ...), always given.
        datamodule: the datamodule (``ledger`` and ``samples``): for asking its class or declared
            spec; a judge reads what was gathered and never draws from it.
        ledger: the datamodule's :class:`~lightning_order.ledger.StepLedger`, or ``None`` (``ledger``).
        pipeline: the pipeline the ledger is judged against (``ledger``).
        fingerprints: the data fingerprints the datamodule declares (``ledger``).
        dims: the data dims the datamodule declares (``ledger``).
        samples: sampled rows (``samples``): ``train`` (a collated train batch or ``None``),
            ``train_size``, ``content`` (the splits' content summary) and ``observed`` (the dims
            the rows show, for a datamodule without ``dims``).
        model: the dims the model was built for (``model``).
        checkpoint: what the checkpoint being resumed holds (``checkpoint``), ``None`` when no
            checkpoint is being resumed.
        ranks: every rank's ``gathered``, in rank order (``ranks``).
        step_one: what the first training step showed (``step-one``), ``None`` before it.
        gathered: this check's own ``gather`` result on this rank (``None`` without one).
    """

    phase: Phase
    world_size: int = 1
    settings: Mapping[str, Any] = field(default_factory=dict)
    datamodule: Any = None
    ledger: Any = None
    pipeline: Any = None
    fingerprints: Mapping[str, str] = field(default_factory=dict)
    dims: Mapping[str, Any] = field(default_factory=dict)
    samples: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Mapping[str, Any] | None = None
    ranks: Sequence[Any] = ()
    step_one: Any = None
    gathered: Any = None

    def only(self, kinds: Iterable[EvidenceKind]) -> CheckEvidence:
        """This evidence with every kind not in ``kinds`` left empty (what a check declared, nothing more)."""
        kinds = set(kinds)
        empty: dict[str, Any] = {}
        if EvidenceKind.LEDGER not in kinds:
            empty |= {"ledger": None, "pipeline": None, "fingerprints": {}, "dims": {}}
        if EvidenceKind.SAMPLES not in kinds:
            empty["samples"] = {}
        if EvidenceKind.LEDGER not in kinds and EvidenceKind.SAMPLES not in kinds:
            empty["datamodule"] = None
        if EvidenceKind.MODEL not in kinds:
            empty["model"] = {}
        if EvidenceKind.CHECKPOINT not in kinds:
            empty["checkpoint"] = None
        if EvidenceKind.RANKS not in kinds:
            empty["ranks"] = ()
        if EvidenceKind.STEP_ONE not in kinds:
            empty["step_one"] = None
        return dataclasses.replace(self, **empty)


#: A judge: the evidence in, the violations out (pure).
Judge = Callable[[CheckEvidence], Iterable[Violation]]
#: A gather: what a check reads on this rank, given the Trainer and the phase's evidence.
Gather = Callable[[Any, CheckEvidence], Any]
#: What a check tells other callbacks it had to go on (``OrderValidator.evidence``), from its
#: ``gathered`` and the ranks' (``()`` when it reads no ranks).
Facts = Callable[[Any, Sequence[Any]], Mapping[str, Any]]

#: The place of a user's check among a phase's checks: after every built-in one.
USER_ORDER = 1000


@dataclass(frozen=True)
class Check:
    """One registered check (see the module's docstring).

    Attributes:
        name: unique among the registered checks.
        phases: when it runs.
        reads: the kinds of evidence its judge reads.
        judge: evidence in, violations out; pure.
        gather: what it reads on this rank (may be a collective: it runs on every rank, in
            registration order), or ``None``.
        rules: the rule codes it may report (a user's own: added to ``RULES`` while registered).
        order: its place among a phase's checks (lower first; built-in checks below :data:`USER_ORDER`).
        fatal: its violations stop the run also when the validator only warns (what follows
            cannot run).
        facts: what it tells other callbacks it had to go on, or ``None``.
    """

    name: str
    phases: tuple[Phase, ...]
    reads: frozenset[EvidenceKind]
    judge: Judge
    gather: Gather | None = None
    rules: tuple[str, ...] = ()
    order: int = USER_ORDER
    fatal: bool = False
    facts: Facts | None = None

    def run_alone(self, trainer: Any, evidence: CheckEvidence) -> tuple[list[Violation], Mapping[str, Any]]:
        """This check on this rank alone, outside a validator's phase: ``(violations, facts)``.

        For another callback that needs one check's verdict when no validator ran it (a ``gather``
        that is a collective still needs every rank to call this at the same point). A check that
        reads the ranks sees this rank's result only.
        """
        seen = evidence.only(self.reads)
        gathered = self.gather(trainer, seen) if self.gather is not None else None
        ranks = (gathered,) if EvidenceKind.RANKS in self.reads else ()
        found = list(self.judge(dataclasses.replace(seen, gathered=gathered, ranks=ranks)))
        return found, (self.facts(gathered, ranks) if self.facts is not None else {})


_CHECKS: dict[str, Check] = {}
#: Rule codes a registered check added to RULES, by check name (removed when it is unregistered).
_ADDED_RULES: dict[str, tuple[str, ...]] = {}


def _phases(phase: Phase | str | Iterable[Phase | str]) -> tuple[Phase, ...]:
    items = [phase] if isinstance(phase, (Phase, str)) else list(phase)
    try:
        phases = tuple(Phase(p) for p in items)
    except ValueError:
        raise ValueError(
            f"unknown phase in {items!r}; expected one of {', '.join(p.value for p in Phase)}"
        ) from None
    if not phases:
        raise ValueError("a check runs in at least one phase")
    return phases


def _kinds(reads: Iterable[EvidenceKind | str]) -> frozenset[EvidenceKind]:
    try:
        return frozenset(EvidenceKind(k) for k in ([reads] if isinstance(reads, str) else reads))
    except ValueError:
        raise ValueError(
            f"unknown evidence in {reads!r}; expected any of {', '.join(k.value for k in EvidenceKind)}"
        ) from None


def _declared_rules(
    name: str, rules: Mapping[str, Rule] | Iterable[str]
) -> tuple[tuple[str, ...], dict[str, Rule]]:
    """The check's rule codes, and those of them new to ``RULES`` (with their meaning)."""
    if isinstance(rules, Mapping):
        new = {}
        for code, rule in rules.items():
            if not isinstance(rule, Rule):
                raise TypeError(
                    f"check {name!r}: rule {code!r} must be a lightning_order.rules.Rule, got {rule!r}"
                )
            if code in RULES and RULES[code] != rule:
                raise ValueError(
                    f"check {name!r}: rule code {code!r} is already defined with another meaning; "
                    "choose a code of your own (rule codes are a contract and are never redefined)"
                )
            if code not in RULES:
                new[code] = rule
        return tuple(rules), new
    codes = (rules,) if isinstance(rules, str) else tuple(rules)
    unknown = [code for code in codes if code not in RULES]
    if unknown:
        raise ValueError(
            f"check {name!r}: unknown rule code(s) {unknown}; declare a new one with its meaning: "
            "register_check(..., rules={'my-rule': Rule(title, symptom, fix)})"
        )
    return codes, {}


def register_check(
    name: str,
    judge: Judge,
    *,
    phase: Phase | str | Iterable[Phase | str],
    reads: Iterable[EvidenceKind | str] = (),
    rules: Mapping[str, Rule] | Iterable[str] = (),
    gather: Gather | None = None,
    order: int = USER_ORDER,
    fatal: bool = False,
    facts: Facts | None = None,
) -> Check:
    """Registers a check: ``OrderValidator`` runs it in ``phase`` from then on, on every rank.

    Examples:
        >>> from lightning_order import Rule, Violation, register_check
        >>> def judge(evidence):
        ...     if evidence.ledger is not None and not evidence.ledger.has("dedup"):
        ...         yield Violation("no-dedup", ("dedup",), "the corpus was never deduplicated")
        >>> register_check("dedup-ran", judge, phase="setup", reads=["ledger"],
        ...                rules={"no-dedup": Rule("no dedup step ran", "memorised duplicates", "add dedup")})  # doctest: +SKIP

    Args:
        name: the check's name, unique (``unregister_check(name)`` removes it).
        judge: evidence in (:class:`CheckEvidence`, only the kinds in ``reads`` filled in),
            violations out; pure.
        phase: when it runs (:class:`Phase`, or its value: ``"setup"``, ``"resume"``,
            ``"fit-start"``, ``"train-start"``, ``"step-one"``), one or several.
        reads: the evidence it reads (:class:`EvidenceKind`, or its value: ``"ledger"``,
            ``"samples"``, ``"model"``, ``"checkpoint"``, ``"ranks"``, ``"step-one"``).
        rules: the rule codes it may report: existing codes, or new codes with their meaning
            (``{"my-rule": Rule(title, symptom, fix)}``), added to ``RULES`` while it is registered.
        gather: what it reads on this rank (``gather(trainer, evidence)``), handed to its judge
            as ``evidence.gathered``; with ``reads=["ranks"]``, every rank's as ``evidence.ranks``.
        order: its place among the phase's checks (lower first); a user's check runs after the
            built-in ones by default.
        fatal: its violations stop the run even when the validator only warns.
        facts: ``facts(gathered, ranks)`` -> what it tells other callbacks it had to go on.

    Returns:
        The registered :class:`Check`.

    Raises:
        ValueError: the name is taken, a phase or evidence kind is unknown, or a rule code is
            unknown (or redefined with another meaning).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a check's name must be a non-empty string, got {name!r}")
    if name in _CHECKS:
        raise ValueError(f"a check named {name!r} is already registered; unregister_check({name!r}) first")
    if not callable(judge) or (gather is not None and not callable(gather)):
        raise TypeError(f"check {name!r}: judge (and gather, when given) must be callable")
    codes, new = _declared_rules(name, rules)
    check = Check(name, _phases(phase), _kinds(reads), judge, gather, codes, order, fatal, facts)
    RULES.update(new)
    _ADDED_RULES[name] = tuple(new)
    _CHECKS[name] = check
    return check


def unregister_check(name: str) -> Check:
    """Removes a registered check (and the rule codes it added to ``RULES``); returns it.

    Raises:
        KeyError: no check of that name is registered.
    """
    if name not in _CHECKS:
        raise KeyError(f"no check named {name!r} is registered; registered: {', '.join(sorted(_CHECKS))}")
    check = _CHECKS.pop(name)
    for code in _ADDED_RULES.pop(name, ()):
        RULES.pop(code, None)
    return check


def registered_checks(phase: Phase | str | None = None) -> list[Check]:
    """The registered checks (of ``phase``), in the order they run: by ``order``, then registration."""
    wanted = None if phase is None else Phase(phase)
    checks = [c for c in _CHECKS.values() if wanted is None or wanted in c.phases]
    return sorted(checks, key=lambda c: c.order)  # stable: registration order among equals


def check_named(name: str) -> Check | None:
    """The registered check called ``name``, or ``None``."""
    return _CHECKS.get(name)


@runtime_checkable
class CheckReport(Protocol):
    """What a callback that runs the registered checks tells other callbacks (``SymptomMonitor``).

    ``OrderValidator`` is one; the monitor reads it through this protocol, never its class.
    """

    @property
    def violations(self) -> list[Violation]:
        """What the latest checks found (also in warn mode), identical on every rank."""
        ...

    @property
    def evidence(self) -> Mapping[str, Any]:
        """What the checks had to go on (each check's ``facts``)."""
        ...

    @property
    def dims(self) -> Mapping[str, Any]:
        """The data's dims as declared."""
        ...

    @property
    def observed(self) -> Mapping[str, Any]:
        """The dims sampled rows showed, for data without declared dims."""
        ...

    @property
    def pipeline(self) -> Any:
        """The pipeline the ledger is judged against."""
        ...

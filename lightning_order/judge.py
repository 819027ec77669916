"""How :meth:`Pipeline.check <lightning_order.order.Pipeline.check>` judges a ledger against a DAG.

Three questions per step, on the latest record of each: did every requirement run, and before it
(``missing-step``, ``out-of-order`` or the specific code the step pair has)? Did it consume the
latest output of each input (``stale-input``, or the specific code when a required step was
bypassed)? For a fitted step, did it learn from the train part of the split (``fit-before-split``,
``shard-before-normalize``)? Pure functions of the records; the pipeline supplies the DAG.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.rules import RULES, Violation

if TYPE_CHECKING:  # pragma: no cover - typing only
    from lightning_order.order import Pipeline

__all__ = ["judge"]


def judge(pipeline: Pipeline, ledger: StepLedger | Iterable[StepRecord]) -> list[Violation]:
    """Every violation of ``pipeline``'s order in ``ledger``, in ledger order, without duplicates."""
    records = list(ledger)
    latest: dict[str, StepRecord] = {}
    for record in records:
        latest[record.step] = record
    ran_before = _RanBefore(records)

    found: dict[tuple[str, tuple[str, ...]], Violation] = {}

    def add(violation: Violation) -> None:
        found.setdefault((violation.rule, violation.steps), violation)

    judged = sorted((r for r in latest.values() if r.step in pipeline), key=lambda r: r.seq)
    for record in judged:
        for violation in _check_order(pipeline, record, latest, ran_before):
            add(violation)
        for violation in _check_stale(pipeline, record, latest):
            add(violation)
        for violation in _check_fitted_on(pipeline, record, latest, records):
            add(violation)
    return list(found.values())


def _check_order(
    pipeline: Pipeline, record: StepRecord, latest: dict[str, StepRecord], ran_before: _RanBefore
) -> list[Violation]:
    step = pipeline[record.step]
    violations = []
    missing = [req for req in step.requires if req not in latest]
    for req in missing:
        violations.append(
            Violation(
                "missing-step",
                (step.name, req),
                f"'{step.name}' ran (seq {record.seq}) but '{req}', which it requires, never "
                f"ran; expected order: {pipeline.expected_order_text(pipeline.ancestors(step.name) | {step.name})}",
            )
        )
    early = [
        a
        for a in pipeline.subset(pipeline.ancestors(step.name))
        if a in latest and not ran_before(a, record.seq)
    ]
    by_rule: dict[str, list[str]] = {}
    for ancestor in early:
        rule = pipeline.rule_for(step.name, ancestor)
        if rule == "out-of-order" and ancestor not in step.requires:
            continue  # reported where the chain broke, at the step that directly required it
        by_rule.setdefault(rule, []).append(ancestor)
    specific = {rule: names for rule, names in by_rule.items() if rule != "out-of-order"}
    for rule, names in (specific or by_rule).items():
        later = ", ".join(f"'{n}' (seq {latest[n].seq})" for n in names)
        violations.append(
            Violation(
                rule,
                (step.name, *names),
                f"'{step.name}' ran at seq {record.seq}, before {later}, which must come "
                f"first; expected order: {pipeline.expected_order_text(pipeline.ancestors(step.name) | {step.name})}",
                symptom=RULES[rule].symptom,
            )
        )
    return violations


def _check_stale(pipeline: Pipeline, record: StepRecord, latest: dict[str, StepRecord]) -> list[Violation]:
    violations = []
    for name, consumed in record.inputs.items():
        producer = latest.get(name)
        if producer is None or name not in pipeline:
            continue
        if consumed in producer.produced or not producer.produced:
            continue
        bypassed = next(
            (latest[a] for a in pipeline.ancestors(name) if a in latest and consumed in latest[a].produced),
            None,
        )
        if bypassed is not None:
            # It consumed what came before the required step: the step was bypassed.
            violations.append(
                Violation(
                    pipeline.rule_for(record.step, name),
                    (record.step, name),
                    f"'{record.step}' (seq {record.seq}) consumed the output of '{bypassed.step}' "
                    f"where it needed the output of '{name}': it worked on data '{name}' never saw",
                )
            )
            continue
        violations.append(
            Violation(
                "stale-input",
                (record.step, name),
                f"'{record.step}' (seq {record.seq}) consumed {name} output {consumed[:12]}, "
                f"but '{name}' was re-run (seq {producer.seq}) and now produces "
                f"{(producer.output or '')[:12]}: '{record.step}' and what follows are stale",
                fix=f"re-run '{record.step}' and every step after it on the new '{name}' output",
            )
        )
    return violations


def _check_fitted_on(
    pipeline: Pipeline, record: StepRecord, latest: dict[str, StepRecord], records: list[StepRecord]
) -> list[Violation]:
    step = pipeline[record.step]
    if step.kind != "fitted" or record.fitted_on is None:
        return []
    splits = [
        latest[a]
        for a in pipeline.subset(pipeline.ancestors(step.name))
        if pipeline[a].kind == "partition" and a in latest and "train" in latest[a].parts
    ]
    if not splits:
        return []
    allowed = {split.parts["train"] for split in splits}
    if record.fitted_on in allowed:
        return []
    producer = next((r for r in reversed(records) if record.fitted_on in r.produced), None)
    if (
        producer is not None
        and producer.step in pipeline.descendants(step.name)
        and pipeline[producer.step].kind == "partition"
    ):
        rule = pipeline.rule_for(producer.step, step.name)
        source = f"a '{producer.step}' part (seq {producer.seq}): one rank's shard"
    else:
        rule = "fit-before-split"
        source = f"the output of '{producer.step}' (seq {producer.seq})" if producer else "unknown data"
        if producer is not None and producer.step in {s.step for s in splits}:
            source = f"a non-train part of '{producer.step}' (seq {producer.seq})"
    return [
        Violation(
            rule,
            (step.name, splits[-1].step),
            f"'{step.name}' learned from {source} ({record.fitted_on[:12]}), not from the "
            f"train split of '{splits[-1].step}' ({splits[-1].parts['train'][:12]})",
        )
    ]


class _RanBefore:
    """Answers "did step X run before seq N?" from the first record of each step."""

    def __init__(self, records: Sequence[StepRecord]) -> None:
        self._first: dict[str, int] = {}
        for record in records:
            self._first.setdefault(record.step, record.seq)

    def __call__(self, step: str, seq: int) -> bool:
        first = self._first.get(step)
        return first is not None and first < seq

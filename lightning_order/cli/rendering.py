"""Pure rendering of a pipeline and a ledger: Mermaid and DOT graphs, and the rows of the audit table.

Nothing here prints or reads files; the CLI (``lightning-order graph`` and ``audit``) does that.
The graph draws each requirement as an edge from the step that must run first to the step that
needs it. Given a ledger, executed steps show their ``seq`` and every edge named by a violation is
drawn in red with the rule code; a violation between steps with no direct edge (a step that ran
before a transitive requirement) gets a dashed red edge of its own, so nothing found is hidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.rules import Violation

__all__ = ["GraphMarks", "graph_marks", "ledger_rows", "to_dot", "to_mermaid"]

_EXECUTED_FILL = "#d9f2d9"
_VIOLATED_FILL = "#f8d0d0"
_VIOLATED_STROKE = "#c00000"


@dataclass(frozen=True)
class GraphMarks:
    """What to mark on a pipeline graph.

    Attributes:
        seq: the ``seq`` of the latest record of each executed step.
        edges: violated edges ``(prerequisite, step)`` with their rule codes.
        extra_edges: violated pairs that are not direct edges of the pipeline, same form.
        steps: steps named first by a violation (the offending steps).
    """

    seq: dict[str, int]
    edges: dict[tuple[str, str], list[str]]
    extra_edges: dict[tuple[str, str], list[str]]
    steps: frozenset[str]


def graph_marks(
    pipeline: Pipeline, ledger: StepLedger | None = None, violations: Iterable[Violation] | None = None
) -> GraphMarks:
    """Works out which steps ran and which edges are violated.

    Args:
        pipeline: the pipeline drawn.
        ledger: what ran; ``None`` draws the bare pipeline.
        violations: the violations to mark; by default ``pipeline.check(ledger)``.

    Returns:
        The marks, ready for :func:`to_mermaid` or :func:`to_dot`.
    """
    seq: dict[str, int] = {}
    if ledger is not None:
        for record in ledger:
            if record.step in pipeline:
                seq[record.step] = record.seq
        if violations is None:
            violations = pipeline.check(ledger)
    direct = {(req, step.name) for step in pipeline for req in step.requires}
    edges: dict[tuple[str, str], list[str]] = {}
    extra: dict[tuple[str, str], list[str]] = {}
    offenders: set[str] = set()
    for violation in violations or ():
        if not violation.steps or violation.steps[0] not in pipeline:
            continue
        offender, *others = violation.steps
        offenders.add(offender)
        for other in others:
            if other not in pipeline:
                continue
            # A violation names the offending step first; the edge runs from whichever of the two
            # the pipeline wants first.
            pair = (other, offender) if other in pipeline.ancestors(offender) else (offender, other)
            target = edges if pair in direct else extra
            rules = target.setdefault(pair, [])
            if violation.rule not in rules:
                rules.append(violation.rule)
    return GraphMarks(seq=seq, edges=edges, extra_edges=extra, steps=frozenset(offenders))


def _label(pipeline: Pipeline, name: str, marks: GraphMarks, newline: str) -> str:
    step = pipeline[name]
    label = f"{name}{newline}{step.kind}"
    if name in marks.seq:
        label += f"{newline}seq {marks.seq[name]}"
    return label


def to_mermaid(pipeline: Pipeline = STANDARD_PIPELINE, marks: GraphMarks | None = None) -> str:
    """The pipeline as a Mermaid flowchart (paste it into a Markdown file or mermaid.live).

    Args:
        pipeline: the pipeline to draw (default: the standard one).
        marks: executed steps and violated edges from :func:`graph_marks`; ``None`` draws the
            bare DAG.

    Returns:
        Mermaid source text.
    """
    marks = marks or graph_marks(pipeline)
    lines = ["flowchart TD"]
    for step in pipeline:
        lines.append(f'    {step.name}["{_label(pipeline, step.name, marks, "<br/>")}"]')
    link_index = 0
    red_links: list[int] = []
    for step in pipeline:
        for req in step.requires:
            rules = marks.edges.get((req, step.name))
            if rules:
                lines.append(f'    {req} -->|"{", ".join(rules)}"| {step.name}')
                red_links.append(link_index)
            else:
                lines.append(f"    {req} --> {step.name}")
            link_index += 1
    for (first, then), rules in marks.extra_edges.items():
        lines.append(f'    {first} -.->|"{", ".join(rules)}"| {then}')
        red_links.append(link_index)
        link_index += 1
    lines.append(f"    classDef executed fill:{_EXECUTED_FILL},stroke:#2e7d32")
    lines.append(f"    classDef violated fill:{_VIOLATED_FILL},stroke:{_VIOLATED_STROKE},stroke-width:2px")
    executed = [name for name in pipeline.order() if name in marks.seq and name not in marks.steps]
    if executed:
        lines.append(f"    class {','.join(executed)} executed")
    violated = [name for name in pipeline.order() if name in marks.steps]
    if violated:
        lines.append(f"    class {','.join(violated)} violated")
    if red_links:
        lines.append(
            f"    linkStyle {','.join(map(str, red_links))} stroke:{_VIOLATED_STROKE},stroke-width:2px"
        )
    return "\n".join(lines) + "\n"


def to_dot(pipeline: Pipeline = STANDARD_PIPELINE, marks: GraphMarks | None = None) -> str:
    """The pipeline as Graphviz DOT (render it with ``dot -Tsvg``).

    Args:
        pipeline: the pipeline to draw (default: the standard one).
        marks: executed steps and violated edges from :func:`graph_marks`; ``None`` draws the
            bare DAG.

    Returns:
        DOT source text.
    """
    marks = marks or graph_marks(pipeline)
    lines = ["digraph pipeline {", "    rankdir=TB;", '    node [shape=box, style="rounded"];']
    for step in pipeline:
        attrs = [f'label="{_label(pipeline, step.name, marks, chr(92) + "n")}"']
        if step.name in marks.steps:
            attrs.append(f'style="rounded,filled", fillcolor="{_VIOLATED_FILL}", color="{_VIOLATED_STROKE}"')
        elif step.name in marks.seq:
            attrs.append(f'style="rounded,filled", fillcolor="{_EXECUTED_FILL}"')
        lines.append(f'    "{step.name}" [{", ".join(attrs)}];')
    for step in pipeline:
        for req in step.requires:
            rules = marks.edges.get((req, step.name))
            attrs = f' [color="{_VIOLATED_STROKE}", penwidth=2, label="{", ".join(rules)}"]' if rules else ""
            lines.append(f'    "{req}" -> "{step.name}"{attrs};')
    for (first, then), rules in marks.extra_edges.items():
        lines.append(
            f'    "{first}" -> "{then}" [color="{_VIOLATED_STROKE}", style=dashed, penwidth=2, '
            f'label="{", ".join(rules)}"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _rows_of(record: StepRecord) -> str:
    stats = record.stats
    if "rows" in stats:
        return str(stats["rows"])
    if "train_rows" in stats or "val_rows" in stats:
        return f"{stats.get('train_rows', '?')} / {stats.get('val_rows', '?')}"
    if "length" in stats:
        return str(stats["length"])
    return ""


def ledger_rows(ledger: StepLedger, pipeline: Pipeline = STANDARD_PIPELINE) -> list[tuple[str, ...]]:
    """The audit table: one row per record, as ``(step, seq, kind, fitted on, rows, fingerprint)``.

    ``fitted on`` names what a fitted step learned from: ``train split`` when it is the train part
    of a partition step that ran, else the producing step, else the short fingerprint; a step
    that took a supplied artefact (``params["source"] == "supplied"``: a tokenizer file) shows
    ``supplied`` and the artefact's content hash. ``rows``
    is ``rows``, ``train / val`` or a shard's ``length`` from the record's stats.

    Args:
        ledger: the records to show.
        pipeline: where step kinds come from (steps it does not know show ``?``).

    Returns:
        Rows of strings, in ledger order.
    """
    rows = []
    for record in ledger:
        kind = pipeline[record.step].kind if record.step in pipeline else "?"
        fitted = ""
        if record.params.get("source") == "supplied":  # e.g. a tokenizer.json trained elsewhere
            fitted = f"supplied (content hash {str(record.params.get('xxh3') or '?')[:12]})"
        elif record.fitted_on:
            producer = next(
                (r for r in ledger if r.seq != record.seq and record.fitted_on in r.produced), None
            )
            if producer is None:
                fitted = record.fitted_on[:12]
            else:
                part = next((k for k, v in producer.parts.items() if v == record.fitted_on), None)
                fitted = f"{part} split" if part else f"{producer.step} output"
                fitted += f" ({record.fitted_on[:8]})"
        rank = f" [rank {record.rank}]" if record.step == "shard" else ""
        rows.append(
            (record.step + rank, str(record.seq), kind, fitted, _rows_of(record), (record.output or "")[:12])
        )
    return rows

"""Tests of lightning_order.cli.rendering: marks from a ledger, Mermaid and DOT text, the audit table's rows."""

from __future__ import annotations

import pytest
from helpers import clean_ledger, leaky_ledger

from lightning_order.cli.rendering import graph_marks, ledger_rows, to_dot, to_mermaid
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline, Step
from lightning_order.rules import Violation

EDGES = sum(len(step.requires) for step in STANDARD_PIPELINE)


def test_bare_pipeline_has_no_marks_and_draws_every_edge() -> None:
    marks = graph_marks(STANDARD_PIPELINE)
    assert marks.seq == {} and marks.edges == {} and marks.extra_edges == {} and marks.steps == frozenset()
    mermaid = to_mermaid()
    assert mermaid.startswith("flowchart TD\n") and mermaid.count(" --> ") == EDGES
    assert "class " not in mermaid and "linkStyle" not in mermaid
    dot = to_dot()
    assert dot.startswith("digraph pipeline {") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == EDGES and "fillcolor" not in dot


def test_a_clean_ledger_marks_executed_steps_only() -> None:
    marks = graph_marks(STANDARD_PIPELINE, clean_ledger())
    assert marks.seq == {name: i for i, name in enumerate(STANDARD_PIPELINE.order()[:7])}
    assert marks.edges == {} and marks.steps == frozenset()
    mermaid = to_mermaid(STANDARD_PIPELINE, marks)
    assert "    class load,clean,engineer_features,split,fit_features,build_vocab,encode executed" in mermaid
    assert 'encode["encode<br/>apply<br/>seq 6"]' in mermaid
    assert '"encode" [label="encode\\napply\\nseq 6", style="rounded,filled"' in to_dot(
        STANDARD_PIPELINE, marks
    )


def test_a_violated_direct_edge_is_red_with_its_rule() -> None:
    marks = graph_marks(STANDARD_PIPELINE, leaky_ledger())
    assert marks.edges == {("split", "fit_features"): ["fit-before-split"]} and marks.extra_edges == {}
    assert marks.steps == {"fit_features"}
    mermaid = to_mermaid(STANDARD_PIPELINE, marks)
    assert 'split -->|"fit-before-split"| fit_features' in mermaid
    assert "class fit_features violated" in mermaid
    assert '"split" -> "fit_features" [color="#c00000", penwidth=2, label="fit-before-split"]' in to_dot(
        STANDARD_PIPELINE, marks
    )


def test_graph_marks_transitive_violation_as_extra_edge() -> None:
    ledger = StepLedger()
    for step in (
        "load",
        "clean",
        "engineer_features",
        "split",
        "build_vocab",
        "shard",
        "fit_features",
        "encode",
    ):
        ledger.record(step)  # shard before fit_features: no direct edge joins them
    marks = graph_marks(STANDARD_PIPELINE, ledger)
    assert marks.extra_edges == {("fit_features", "shard"): ["shard-before-normalize"]}
    assert marks.steps == {"shard"} and marks.seq["shard"] == 5
    mermaid = to_mermaid(STANDARD_PIPELINE, marks)
    assert 'fit_features -.->|"shard-before-normalize"| shard' in mermaid
    assert "class shard violated" in mermaid and "linkStyle 15 stroke" in mermaid
    assert '"fit_features" -> "shard" [color="#c00000", style=dashed' in to_dot(STANDARD_PIPELINE, marks)


def test_ledger_rows_columns() -> None:
    rows = ledger_rows(clean_ledger())
    assert [r[0] for r in rows] == STANDARD_PIPELINE.order()[:7]  # load ... encode
    split = rows[3]
    assert split[1:3] == ("3", "partition") and split[4] == "9 / 1"
    assert rows[4][3].startswith("train split")


def test_given_violations_replace_the_check_and_unknown_steps_are_skipped() -> None:
    violations = [
        Violation("out-of-order", ("encode", "build_vocab"), "m"),
        Violation("out-of-order", ("dedupe", "clean"), "a step this pipeline does not have"),
        Violation("out-of-order", ("encode", "nowhere"), "a prerequisite it does not have"),
    ]
    marks = graph_marks(STANDARD_PIPELINE, clean_ledger(), violations=violations)
    assert marks.edges == {("build_vocab", "encode"): ["out-of-order"]} and marks.steps == {"encode"}


def test_a_user_pipeline_is_drawn_with_its_own_steps() -> None:
    pipeline = STANDARD_PIPELINE.extend(Step("dedupe", ("clean",), "rowwise"), before="split")
    mermaid = to_mermaid(pipeline)
    assert 'dedupe["dedupe<br/>rowwise"]' in mermaid and "clean --> dedupe" in mermaid
    assert "dedupe --> split" in mermaid


@pytest.mark.parametrize("fitted_on", ["v" * 32, "x" * 32])
def test_ledger_rows_name_what_a_fitted_step_learned_from(fitted_on: str) -> None:
    ledger = leaky_ledger() if fitted_on.startswith("v") else StepLedger()
    if not len(ledger):
        ledger.record("load")
        ledger.record("fit_features", fitted_on=fitted_on)
    fitted = next(row for row in ledger_rows(ledger) if row[0] == "fit_features")[3]
    assert fitted == ("val split (vvvvvvvv)" if fitted_on.startswith("v") else "x" * 12)


def test_ledger_rows_of_shards_and_unknown_steps() -> None:
    ledger = StepLedger()
    ledger.record("shard", rank=1, stats={"length": 42})
    ledger.record("my_step")
    rows = ledger_rows(ledger, Pipeline([Step("shard", kind="partition")]))
    assert rows[0][:3] == ("shard [rank 1]", "0", "partition") and rows[0][4] == "42"
    assert rows[1][:3] == ("my_step", "1", "?") and rows[1][4] == ""

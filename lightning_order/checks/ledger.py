"""Checks on the ledger: what ran, in which order, judged against a pipeline.

:meth:`Pipeline.check` is the engine; this module adds what it cannot see from order alone: a
model built on other dims than the data's (its ``init_model`` record says what it was built
with), or built before the data was (re-)encoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightning_order.checks.fit_items import check_fitted_items
from lightning_order.checks.report import merge_violations
from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import STANDARD_PIPELINE, Pipeline, Step
from lightning_order.rules import Violation

__all__ = ["check_init_order", "check_ledger", "judged_pipeline", "project_pipeline"]


def check_ledger(
    ledger: StepLedger | Iterable[StepRecord], pipeline: Pipeline = STANDARD_PIPELINE
) -> list[Violation]:
    """Every violation in ``ledger``: :meth:`Pipeline.check` plus :func:`check_init_order`.

    Args:
        ledger: what ran (a :class:`StepLedger`, or its records).
        pipeline: the DAG to judge against.

    Returns:
        The violations, the pipeline's first, without duplicates.
    """
    records = ledger if isinstance(ledger, StepLedger) else StepLedger(list(ledger))
    return merge_violations(
        pipeline.check(records), check_init_order(records), check_fitted_items(records.records)
    )


def check_init_order(ledger: StepLedger, data_dims: Mapping[str, Any] | None = None) -> list[Violation]:
    """``init-before-data`` from the ledger: the model was built on other data than this.

    Two cases the order alone does not show: the latest ``init_model`` record is older than the
    latest ``encode`` (the data was re-encoded after the model was built), or its ``params``
    (the dims the model was built with) differ from the data's dims. The dims compared are the
    keys both sides hold: the validator records ``init_model`` with the model's values of the
    pipelines' dims (:func:`lightning_order.pipelines.all_dims`), the datamodule records its own
    pipeline's dims, so no list of dims is kept here.

    Args:
        ledger: what ran.
        data_dims: the data's dims; by default ``ledger.info["dims"]``.

    Returns:
        At most one violation per case.
    """
    init = ledger.latest("init_model")
    if init is None:
        return []
    violations = []
    encode = ledger.latest("encode")
    if encode is not None and encode.seq > init.seq:
        first_encode = next(r for r in ledger if r.step == "encode")
        if first_encode.seq < init.seq:  # a model built before any encode is Pipeline.check's case
            violations.append(
                Violation(
                    "init-before-data",
                    ("init_model", "encode"),
                    f"the model was built (seq {init.seq}) before the data was encoded again "
                    f"(seq {encode.seq}): it was sized for the old encoding",
                )
            )
    dims = dict(data_dims if data_dims is not None else ledger.info.get("dims") or {})
    differing = {
        key: (init.params[key], dims[key])
        for key in init.params
        if key in dims and init.params[key] != dims[key]
    }
    if differing:
        text = ", ".join(f"{key}={model} (data: {data})" for key, (model, data) in differing.items())
        violations.append(
            Violation(
                "init-before-data",
                ("init_model", "encode"),
                f"the model was built with {text}",
                details={"differing": differing},
            )
        )
    return violations


#: The steps the validator records itself (at Lightning's hooks), always judged.
MODEL_STEPS: tuple[str, ...] = ("init_model", "configure_optimizers", "train", "evaluate")


def project_pipeline(pipeline: Pipeline, keep: Iterable[str]) -> Pipeline:
    """``pipeline`` restricted to the steps ``keep``, each requiring its nearest kept ancestors.

    A hand-written datamodule records only the steps it declares: a requirement it never declared
    is unknown, not missing. The projection keeps every order the full pipeline implies between
    the kept steps (and each step's kind, hence the specific rule codes).

    Args:
        pipeline: the full pipeline.
        keep: the names to keep (names of no step are ignored).
    """
    kept = set(pipeline.subset(keep))

    def nearest(names: Iterable[str]) -> list[str]:
        found: list[str] = []
        for name in names:
            if name in kept:
                found.append(name)
            else:
                found.extend(nearest(pipeline[name].requires))
        return found

    steps = []
    for name in pipeline.subset(kept):
        step = pipeline[name]
        steps.append(Step(name, tuple(dict.fromkeys(nearest(step.requires))), step.kind, step.description))
    return Pipeline(steps, rules=pipeline.rules)


def judged_pipeline(pipeline: Pipeline, ledger: StepLedger) -> Pipeline:
    """The pipeline a ledger is judged against: projected on the declared steps, when it says which.

    A ledger written by :mod:`lightning_order.recording` lists the steps its datamodule declares
    in ``info["declared_steps"]``; others (``OrderedDataModule``'s) are judged on the full pipeline.
    """
    declared = ledger.info.get("declared_steps")
    if not declared:
        return pipeline
    return project_pipeline(pipeline, [*declared, *MODEL_STEPS, *(r.step for r in ledger)])

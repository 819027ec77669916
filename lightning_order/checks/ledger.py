"""Checks on the ledger: what ran, in which order, judged against a pipeline.

:meth:`Pipeline.check` is the engine; this module adds what it cannot see from order alone: a
model built on other dims than the data's (its ``init_model`` record says what it was built
with), or built before the data was (re-)encoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lightning_order.checks.report import merge_violations
from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.rules import Violation

__all__ = ["DIM_KEYS", "check_init_order", "check_ledger"]

#: The data dims a model is built from (docs/architecture.md, "Dims contract").
DIM_KEYS: tuple[str, ...] = ("vocab_size", "num_features", "num_classes", "max_length")


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
    return merge_violations(pipeline.check(records), check_init_order(records))


def check_init_order(ledger: StepLedger, data_dims: Mapping[str, Any] | None = None) -> list[Violation]:
    """``init-before-data`` from the ledger: the model was built on other data than this.

    Two cases the order alone does not show: the latest ``init_model`` record is older than the
    latest ``encode`` (the data was re-encoded after the model was built), or its ``params``
    (the dims the model was built with) differ from the data's dims.

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
        for key in DIM_KEYS
        if key in init.params and key in dims and init.params[key] != dims[key]
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

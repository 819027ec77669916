"""What a ledger proves about the leakage rules: fitted steps on the train split, a split by key.

The monitor's attribution (:func:`~lightning_order.checks.symptoms.ruled_out`) needs two facts a
ledger can prove or leave open, read here once into plain data (:class:`LedgerProof`):

* every fitted step the pipeline declares learned from a split's train part (its
  ``fitted_on`` fingerprint is that part's): no statistic, vocabulary or encoding the pipeline
  fitted saw a validation row. A fitted step that did not run, or whose data is unknown (a
  hand-written step fed with data no recorded step produced), leaves the question open;
* the split assigns rows by a hash of their key (the split records the key it hashed) and the
  ledger judges it in order, so no key sits on both sides.

Pure: ledger records and a pipeline in, booleans out. Trade-off: the proof is as good as the
ledger. A step that ran outside it (features computed before the datamodule) is invisible here,
which is why ``fit-before-split`` is only excluded with the label-encoding check's verdict too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lightning_order.ledger import StepLedger, StepRecord
from lightning_order.order import Pipeline

__all__ = ["LedgerProof", "ledger_proof"]

#: What the judge reports for a fitted step that learned from the wrong rows (or ran before the split).
_FITTED_RULES = frozenset({"fit-before-split", "shard-before-normalize"})


@dataclass(frozen=True)
class LedgerProof:
    """What a ledger proves (``True``), disproves (``False``) or leaves open (``None``).

    Attributes:
        fitted_on_train: every fitted step of the pipeline learned from a split's train part.
        split_by_key: the latest split hashed a recorded key and is judged in order (``False``:
            it hashed a key but ran out of order, e.g. before cleaning; ``None``: no key recorded).
    """

    fitted_on_train: bool | None = None
    split_by_key: bool | None = None


def ledger_proof(ledger: StepLedger | Iterable[StepRecord], pipeline: Pipeline) -> LedgerProof:
    """Reads the leakage facts off ``ledger``, judged against ``pipeline``.

    Args:
        ledger: what ran (a :class:`~lightning_order.ledger.StepLedger` or its records).
        pipeline: the pipeline that judges it (for a hand-written datamodule, projected on the
            steps it declares: :func:`~lightning_order.checks.ledger.judged_pipeline`).

    Returns:
        The proof; both facts ``None`` when the ledger holds no split with a train part.
    """
    records = list(ledger)
    latest: dict[str, StepRecord] = {r.step: r for r in records}
    splits = {
        name: record
        for name, record in latest.items()
        if name in pipeline and pipeline[name].kind == "partition" and "train" in record.parts
    }
    if not splits:
        return LedgerProof()
    trains = {record.parts["train"] for record in splits.values()}
    fitted = [latest.get(step.name) for step in pipeline if step.kind == "fitted"]
    violations = pipeline.check(records)
    fitted_on_train: bool | None = None
    if any(v.rule in _FITTED_RULES for v in violations) or any(
        r is not None and r.fitted_on is not None and r.fitted_on not in trains for r in fitted
    ):
        fitted_on_train = False
    elif fitted and all(r is not None and r.fitted_on in trains for r in fitted):
        fitted_on_train = True  # at least one fitted step, and every one learned from the train part
    split = next(
        (latest[s.name] for s in pipeline if s.kind == "partition" and s.name in splits),
        None,
    )
    # A violation of the split itself (it ran before cleaning, or without it) names it first.
    in_order = split is not None and not any(v.steps[:1] == (split.step,) for v in violations)
    keyed = split is not None and bool(split.params.get("key"))
    return LedgerProof(fitted_on_train=fitted_on_train, split_by_key=in_order if keyed else None)

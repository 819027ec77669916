"""What every rank holds, gathered; a phase's registered checks run; one verdict all ranks agree on.

Cross-rank decisions are taken on gathered data, so every rank acts alike and none is left
waiting in a collective the others skipped (STYLE.md, rank discipline). Under one process
:func:`all_gather` and :func:`agree` are the identity.

:func:`run_phase` runs what :mod:`lightning_order.checks.registry` holds for a phase: each
check's ``gather`` on this rank, in the registry's order (identical on every rank, so a gather
that is itself a collective meets the others'), then its judge on the evidence it declared; one
all-gather carries every rank's violations and the gathered results of the checks that read the
ranks, whose judges then run on the same data on every rank. So a phase costs one collective
besides its checks' own, whatever is registered.

:func:`rank_summary` is what one rank contributes to the rank check
(:func:`lightning_order.checks.ranks.check_ranks`), registered here as ``rank-data``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from lightning_order.callbacks.validator.batches import as_numpy, batch_field
from lightning_order.checks.datasets import check_rank_datasets, same_rows_compared
from lightning_order.checks.ranks import check_ranks
from lightning_order.checks.registry import (
    CheckEvidence,
    EvidenceKind,
    Phase,
    register_check,
    registered_checks,
)
from lightning_order.checks.report import merge_violations
from lightning_order.ledger import StepLedger
from lightning_order.parallelism import data_parallel
from lightning_order.rules import Violation

__all__ = ["PhaseResult", "agree", "all_gather", "rank_identity", "rank_summary", "run_phase"]


def all_gather(trainer: Any, obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order (a one-element list in a single process).

    Collective under DDP: every rank must call it at the same point.
    """
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, obj)
        return gathered
    return [obj]


def agree(per_rank: list[list[dict[str, Any]]]) -> list[Violation]:
    """One list from every rank's violations (as dicts), identical on every rank.

    Rank 0's violations come first, all of them; another rank adds what rank 0 did not report
    under the same rule and steps (ranks word the same finding with their own fingerprints).
    """
    found: list[Violation] = []
    for rank, dicts in enumerate(per_rank):
        known = {(v.rule, v.steps) for v in found}
        for d in dicts:
            violation = Violation.from_dict(d)
            if rank == 0 or (violation.rule, violation.steps) not in known:
                found.append(violation)
    return merge_violations(found)


def rank_identity(trainer: Any) -> dict[str, Any]:
    """``rank`` (global) and ``data_parallel`` (:class:`~lightning_order.parallelism.DataParallel` as a dict).

    The rank checks group ranks by their data-parallel rank: one tensor-parallel group each.
    """
    return {"rank": int(trainer.global_rank), "data_parallel": data_parallel(trainer).to_dict()}


def rank_summary(
    trainer: Any, dm: Any, ledger: StepLedger | None, fingerprints: Mapping[str, str], train_batch: Any
) -> dict[str, Any]:
    """This rank's summary for :func:`~lightning_order.checks.ranks.check_ranks` (its keys are listed there).

    Args:
        trainer: the Trainer (its rank and world size).
        dm: the datamodule (its ``shard_info``, if any).
        ledger: the datamodule's ledger (the statistics ``fit_features`` recorded).
        fingerprints: the data fingerprints this rank holds.
        train_batch: a sampled train batch whose ``features`` statistics are compared across ranks
            when there are no fingerprints to compare (``None``: not compared).
    """
    shard_info = getattr(dm, "shard_info", None) if dm is not None else None
    summary: dict[str, Any] = {
        **rank_identity(trainer),
        "fingerprints": dict(fingerprints),
        "shard_length": shard_info.get("length") if isinstance(shard_info, Mapping) else None,
        "shard_start": shard_info.get("start") if isinstance(shard_info, Mapping) else None,
    }
    fitted = ledger.latest("fit_features") if ledger is not None else None
    if fitted is not None:
        summary["feature_names"] = fitted.stats.get("columns")
        summary["fitted_mean"] = fitted.stats.get("mean")
    if trainer.world_size > 1 and train_batch is not None:
        # No fingerprints to compare: sampled feature statistics are the evidence left.
        features = as_numpy(batch_field(train_batch, "features"))
        if features is not None and features.ndim == 2 and len(features):
            summary["feature_mean"] = features.mean(axis=0).tolist()
            summary["feature_std"] = features.std(axis=0).tolist()
            summary["feature_rows"] = int(features.shape[0])
    return summary


@dataclass
class PhaseResult:
    """What :func:`run_phase` found, identical on every rank.

    Attributes:
        violations: every registered check's, agreed across ranks (rank 0's first).
        fatal: whether a check marked ``fatal`` found something (the run stops even in warn mode).
        facts: what the checks had to go on (each check's ``facts``), for other callbacks.
        checks: the names of the checks that ran, in order.
    """

    violations: list[Violation] = field(default_factory=list)
    fatal: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)


def run_phase(trainer: Any, phase: Phase, evidence: CheckEvidence) -> PhaseResult:
    """Runs every check registered for ``phase`` on ``evidence``; the verdict agreed across ranks.

    Collective under DDP: every rank must call it at the same point (one all-gather, plus the
    collectives of the checks' own ``gather``, in the same order on every rank).

    Args:
        trainer: the Trainer (the all-gather; handed to each check's ``gather``).
        phase: the phase being judged.
        evidence: what the caller gathered for the phase (each check sees the kinds it declares).
    """
    checks = registered_checks(phase)
    gathered = {c.name: c.gather(trainer, evidence.only(c.reads)) if c.gather else None for c in checks}

    def view(check: Any, ranks: list[Any] | tuple[()] = ()) -> CheckEvidence:
        return dataclasses.replace(evidence.only(check.reads), gathered=gathered[check.name], ranks=ranks)

    local: list[Violation] = []
    fatal = False
    for check in checks:
        if EvidenceKind.RANKS not in check.reads:
            found = list(check.judge(view(check)))
            local += found
            fatal |= check.fatal and bool(found)
    shared = {c.name: gathered[c.name] for c in checks if EvidenceKind.RANKS in c.reads}
    per_rank = all_gather(
        trainer, {"ranks": shared, "violations": [v.to_dict() for v in local], "fatal": fatal}
    )
    violations = agree([g["violations"] for g in per_rank])
    fatal = any(g["fatal"] for g in per_rank)
    ranks = {name: [g["ranks"][name] for g in per_rank] for name in shared}
    for check in checks:
        if EvidenceKind.RANKS in check.reads:  # the same gathered data on every rank: the same verdict
            found = list(check.judge(view(check, ranks[check.name])))
            violations = merge_violations(violations, found)
            fatal |= check.fatal and bool(found)
    facts: dict[str, Any] = {}
    for check in checks:
        if check.facts is not None:
            facts.update(check.facts(gathered[check.name], ranks.get(check.name, ())))
    return PhaseResult(violations, fatal, facts, [c.name for c in checks])


# -- the rank check ------------------------------------------------------------------------------
def _gather_rank_data(trainer: Any, evidence: CheckEvidence) -> dict[str, Any]:
    samples = evidence.samples
    content = samples.get("content") or {}
    # The content summary compares every float key; the sampled `features` only where it is missing.
    train = None if content.get("train") else samples.get("train")
    summary = rank_summary(trainer, evidence.datamodule, evidence.ledger, evidence.fingerprints, train)
    summary["content"] = {**rank_identity(trainer), **content, "model": dict(evidence.model)}
    return summary


def _judge_rank_data(evidence: CheckEvidence) -> list[Violation]:
    summaries = list(evidence.ranks)
    return merge_violations(check_ranks(summaries), check_rank_datasets([s["content"] for s in summaries]))


register_check(
    "rank-data",
    _judge_rank_data,
    phase=Phase.SETUP,
    reads=[EvidenceKind.RANKS, EvidenceKind.LEDGER, EvidenceKind.SAMPLES, EvidenceKind.MODEL],
    rules=("rank-mismatch", "shard-before-normalize"),
    gather=_gather_rank_data,
    order=40,
    facts=lambda _own, ranks: {"same_rows_floats": same_rows_compared([s["content"] for s in ranks])},
)

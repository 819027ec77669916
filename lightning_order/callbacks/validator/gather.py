"""What every rank holds, gathered, and one verdict all ranks agree on.

Cross-rank decisions are taken on gathered data, so every rank acts alike and none is left
waiting in a collective the others skipped (STYLE.md, rank discipline). Under one process
:func:`all_gather` and :func:`agree` are the identity. :func:`rank_summary` is what one rank
contributes to the rank check (:func:`lightning_order.checks.ranks.check_ranks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_order.callbacks.validator.batches import as_numpy, batch_field
from lightning_order.checks.report import merge_violations
from lightning_order.ledger import StepLedger
from lightning_order.parallelism import data_parallel
from lightning_order.rules import Violation

__all__ = ["agree", "all_gather", "rank_identity", "rank_summary"]


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

"""Pure checks: functions of plain data (ledger records, small tensors, dims) -> list[Violation].

The callbacks gather the data and act on the result; nothing here touches a Trainer.

The names are imported on first use (:func:`~lightning_order.lazy.lazy_exports`): importing one
check module does not import the others, so the engine's own checks (:mod:`.ledger`) are read
without :mod:`.model`, which asks the pipeline registry for every pipeline's dims.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_order.lazy import lazy_exports

_LAZY: dict[str, str] = {
    "check_rank_datasets": "lightning_order.checks.datasets",
    "check_twin_rate": "lightning_order.checks.datasets",
    "same_rows_compared": "lightning_order.checks.datasets",
    "check_fitted_on_train": "lightning_order.checks.leakage",
    "check_key_overlap": "lightning_order.checks.leakage",
    "check_row_overlap": "lightning_order.checks.leakage",
    "row_hashes": "lightning_order.checks.leakage",
    "check_init_order": "lightning_order.checks.ledger",
    "check_ledger": "lightning_order.checks.ledger",
    "judged_pipeline": "lightning_order.checks.ledger",
    "project_pipeline": "lightning_order.checks.ledger",
    "check_model_dims": "lightning_order.checks.model",
    "check_ranks": "lightning_order.checks.ranks",
    "estimate_waste": "lightning_order.checks.report",
    "format_diagnoses": "lightning_order.checks.report",
    "format_report": "lightning_order.checks.report",
    "merge_violations": "lightning_order.checks.report",
    "check_restore_shapes": "lightning_order.checks.resume",
    "check_resume": "lightning_order.checks.resume",
    "check_resume_position": "lightning_order.checks.resume",
    "check_resume_proof": "lightning_order.checks.resume",
    "stored_fingerprints": "lightning_order.checks.resume",
    "stored_position": "lightning_order.checks.resume",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from lightning_order.checks.datasets import check_rank_datasets as check_rank_datasets
    from lightning_order.checks.datasets import check_twin_rate as check_twin_rate
    from lightning_order.checks.datasets import same_rows_compared as same_rows_compared
    from lightning_order.checks.leakage import check_fitted_on_train as check_fitted_on_train
    from lightning_order.checks.leakage import check_key_overlap as check_key_overlap
    from lightning_order.checks.leakage import check_row_overlap as check_row_overlap
    from lightning_order.checks.leakage import row_hashes as row_hashes
    from lightning_order.checks.ledger import check_init_order as check_init_order
    from lightning_order.checks.ledger import check_ledger as check_ledger
    from lightning_order.checks.ledger import judged_pipeline as judged_pipeline
    from lightning_order.checks.ledger import project_pipeline as project_pipeline
    from lightning_order.checks.model import check_model_dims as check_model_dims
    from lightning_order.checks.ranks import check_ranks as check_ranks
    from lightning_order.checks.report import estimate_waste as estimate_waste
    from lightning_order.checks.report import format_diagnoses as format_diagnoses
    from lightning_order.checks.report import format_report as format_report
    from lightning_order.checks.report import merge_violations as merge_violations
    from lightning_order.checks.resume import check_restore_shapes as check_restore_shapes
    from lightning_order.checks.resume import check_resume as check_resume
    from lightning_order.checks.resume import check_resume_position as check_resume_position
    from lightning_order.checks.resume import check_resume_proof as check_resume_proof
    from lightning_order.checks.resume import stored_fingerprints as stored_fingerprints
    from lightning_order.checks.resume import stored_position as stored_position
else:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

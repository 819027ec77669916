"""Pure checks: functions of plain data (ledger records, small tensors, dims) -> list[Violation].

The callbacks gather the data and act on the result; nothing here touches a Trainer.
"""

from lightning_order.checks.datasets import check_rank_datasets, check_twin_rate
from lightning_order.checks.leakage import (
    check_fitted_on_train,
    check_key_overlap,
    check_row_overlap,
    row_hashes,
)
from lightning_order.checks.ledger import check_init_order, check_ledger, judged_pipeline, project_pipeline
from lightning_order.checks.model import check_model_dims
from lightning_order.checks.ranks import check_ranks
from lightning_order.checks.report import estimate_waste, format_diagnoses, format_report, merge_violations
from lightning_order.checks.resume import (
    check_restore_shapes,
    check_resume,
    check_resume_position,
    check_resume_proof,
    stored_fingerprints,
    stored_position,
)

__all__ = [
    "check_fitted_on_train",
    "check_init_order",
    "check_key_overlap",
    "check_ledger",
    "check_model_dims",
    "check_rank_datasets",
    "check_ranks",
    "check_restore_shapes",
    "check_resume",
    "check_resume_position",
    "check_resume_proof",
    "check_row_overlap",
    "check_twin_rate",
    "estimate_waste",
    "format_diagnoses",
    "format_report",
    "judged_pipeline",
    "merge_violations",
    "project_pipeline",
    "row_hashes",
    "stored_fingerprints",
    "stored_position",
]

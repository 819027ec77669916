"""Helpers shared by the test files (one copy of each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl


def quiet_trainer(
    tmp_path: Path | str | None = None, callbacks: list | None = None, **kwargs: Any
) -> pl.Trainer:
    """A CPU ``Trainer`` that prints and writes nothing it is not asked to.

    No logger, checkpointing, progress bar, model summary or sanity validation; ``kwargs``
    override any of it (``enable_checkpointing=True``, ``max_steps=...``).
    """
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": str(tmp_path) if tmp_path is not None else None,
    }
    return pl.Trainer(callbacks=list(callbacks or []), **{**options, **kwargs})

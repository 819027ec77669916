"""Step 2, ``clean``: row-wise text normalisation.

Order inside the step matters and is fixed here: entities are unescaped first (``&lt;br&gt;``
becomes a tag that is then stripped), unicode is NFKC-normalised (full-width letters, ligatures
and non-breaking spaces become their plain forms), tags are stripped, stray ``##`` word-piece
markers are dropped, runs of the same punctuation collapse to one, whitespace collapses to one
space, and the text is lower-cased (optional). Everything is a compiled regular expression over a
batch: cheap, stateless, and safe under ``num_proc``.

The step runs the same cleaning vectorised over Arrow batches (:func:`~.arrow.clean_array`, exactly
the same text for every row); a user's own ``clean`` (``ctx.hooks["clean"]``) runs row-wise
through ``datasets.map``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult, apply_rowwise
from lightning_order.data.text.arrow import clean_array
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.normalise import clean_text
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["CleanRows", "CleanTable", "clean", "clean_batch", "clean_text"]  # clean_text: see normalise.py


def clean_batch(
    batch: dict[str, list[Any]], text_column: str, lowercase: bool = True
) -> dict[str, list[Any]]:
    """Cleans the text column of a batch in place and returns the batch.

    Raises:
        DataError: a text value is not a string (``None``, a number, ...).
    """
    texts = batch[text_column]
    cleaned = []
    for value in texts:
        if not isinstance(value, str):
            raise DataError(
                f"expected text (str) in every row, got {type(value).__name__} ({value!r:.40}); "
                "fix the data or set text_column to the column that holds the text",
                step="clean",
                column=text_column,
            )
        cleaned.append(clean_text(value, lowercase))
    batch[text_column] = cleaned
    return batch


class CleanRows:
    """A batch cleaning function, then drops the rows whose text is empty (picklable for ``num_proc``).

    Args:
        clean: cleans a batch (``clean_batch`` with its arguments, or an overridden ``clean``).
        text_column: the text column.
    """

    def __init__(
        self, clean: Callable[[dict[str, list[Any]]], dict[str, list[Any]]], text_column: str
    ) -> None:
        self.clean = clean
        self.text_column = text_column

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch = self.clean(dict(batch))
        texts = batch[self.text_column]
        keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        if len(keep) == len(texts):
            return batch
        return {k: [v[i] for i in keep] for k, v in batch.items()}


class CleanTable:
    """The default cleaning of an Arrow batch (vectorised), then drops the rows whose text is empty."""

    def __init__(self, text_column: str, lowercase: bool = True) -> None:
        self.text_column = text_column
        self.lowercase = lowercase

    def __call__(self, table: pa.Table) -> pa.Table:
        column = table[self.text_column]
        if column.null_count:
            raise DataError(
                "expected text (str) in every row, got NoneType (None); "
                "fix the data or set text_column to the column that holds the text",
                step="clean",
                column=self.text_column,
            )
        cleaned = clean_array(column, self.lowercase)
        table = table.set_column(table.schema.get_field_index(self.text_column), self.text_column, cleaned)
        keep = np.asarray(pc.utf8_length(cleaned), dtype=np.int64) > 0
        return table if keep.all() else table.filter(pa.array(keep))


@STEPS.register(
    "clean", takes=ROWS, reads="data", writes_data=True, config=("text_column", "lowercase", "overrides")
)
def clean(ctx: StepContext, state: DataState) -> StepResult:
    """Step 2: cleans every row (``ctx.hooks["clean"]`` when the owner overrides it) and drops empty ones."""
    from lightning_order.data.engine.tables import apply_tables  # datasets: imported when data is cleaned

    cfg: DataConfig = ctx.config
    fp = fingerprint(ctx.fingerprint, CODE_VERSION)
    before = state.rows()
    if ctx.hooks.get("clean") is not None:
        state = apply_rowwise(cfg, state, fp, ctx.hooks["clean"])
    else:
        state = apply_tables(ctx, state, fp, "clean", CleanTable(cfg.text_column, cfg.lowercase))
    rows = state.rows()
    if rows == 0:
        raise DataError(
            "every row is empty after cleaning (the text was only markup or whitespace); "
            "check text_column, or override clean()",
            step="clean",
            column=cfg.text_column,
        )
    for name, part in state.parts.items():
        if len(part) == 0:
            raise DataError(
                f"the {name} split is empty after cleaning; use more data or another val_fraction",
                step="clean",
                column=cfg.text_column,
            )
    return StepResult(
        state,
        fp,
        parts=dict(state.part_fps) if state.parts else {},
        params={"lowercase": cfg.lowercase},
        stats={"rows": rows, "dropped": before - rows},
    )

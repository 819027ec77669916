"""Step 3, ``engineer_features``: stateless per-row features, and the numeric columns' checks.

Every feature here looks at one row only, so it may run before the split (docs/data.md, "The steps").
Engineered features are appended after the configured numeric columns; together they are the
model's ``features`` vector. Non-finite values are rejected here, row-wise, so a NaN in a
validation row is caught as surely as one in a train row.

The default features are computed vectorised over Arrow batches (:func:`~.arrow.text_features`:
exactly the values of :func:`engineer_batch`); a user's own ``engineer_features``
(``ctx.hooks["engineer_features"]``), or numeric columns that are not numbers in Arrow, go
row-wise through ``datasets.map``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lightning_order.data.engine.runner import (
    ROWS,
    DataState,
    StepContext,
    StepResult,
    apply_rowwise,
    train_data,
)
from lightning_order.data.text.arrow import text_features
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

if TYPE_CHECKING:  # datasets is imported when features are computed (a cache hit needs none)
    import datasets

__all__ = [
    "ENGINEERED_FEATURES",
    "FeatureTable",
    "check_numeric",
    "engineer_batch",
    "engineer_features",
    "fit_features",
    "fit_statistics",
    "streaming_moments",
]

#: The default engineered features, in order (column names in the prepared data).
ENGINEERED_FEATURES: tuple[str, ...] = ("feat_chars", "feat_words", "feat_mean_word_len", "feat_punct")

_PUNCT = frozenset("!?.,;:")


def check_numeric(batch: dict[str, list[Any]], numeric_columns: Sequence[str], step: str) -> None:
    """Raises :class:`DataError` when a numeric column holds a missing, NaN or infinite value."""
    for column in numeric_columns:
        try:
            values = np.asarray(batch[column], dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(
                f"expected numbers, got non-numeric values (e.g. {batch[column][:3]!r}); "
                "convert the column or remove it from numeric_columns",
                step=step,
                column=column,
            ) from None
        bad = ~np.isfinite(values)
        if bad.any():
            example = values[bad][0]
            raise DataError(
                f"{int(bad.sum())} value(s) in this batch are missing, NaN or infinite (e.g. {example}); "
                "impute or drop those rows before preparing (statistics would be NaN)",
                step=step,
                column=column,
            )


def engineer_batch(
    batch: dict[str, list[Any]], text_column: str, numeric_columns: Sequence[str]
) -> dict[str, list[Any]]:
    """Adds the :data:`ENGINEERED_FEATURES` columns to a batch (row-wise, stateless)."""
    check_numeric(batch, numeric_columns, "engineer_features")
    chars, words, mean_len, punct = [], [], [], []
    for text in batch[text_column]:
        n_words = len(text.split())
        chars.append(float(len(text)))
        words.append(float(n_words))
        mean_len.append(len(text) / n_words if n_words else 0.0)
        punct.append(math.log1p(sum(1 for c in text if c in _PUNCT)))
    batch["feat_chars"] = chars
    batch["feat_words"] = words
    batch["feat_mean_word_len"] = mean_len
    batch["feat_punct"] = punct
    return batch


class FeatureTable:
    """The default engineered features of an Arrow batch (vectorised), after the numeric columns' checks."""

    def __init__(self, text_column: str, numeric_columns: Sequence[str]) -> None:
        self.text_column = text_column
        self.numeric_columns = list(numeric_columns)

    def __call__(self, table: pa.Table) -> pa.Table:
        for column in self.numeric_columns:
            values = np.asarray(table[column].to_numpy(zero_copy_only=False), dtype=np.float64)
            bad = ~np.isfinite(values)
            if bad.any():
                raise DataError(
                    f"{int(bad.sum())} value(s) in this batch are missing, NaN or infinite (e.g. {values[bad][0]}); "
                    "impute or drop those rows before preparing (statistics would be NaN)",
                    step="engineer_features",
                    column=column,
                )
        for name, values in text_features(table[self.text_column]).items():
            index = table.schema.get_field_index(name)
            column = pa.array(values, type=pa.float64())
            table = table.append_column(name, column) if index < 0 else table.set_column(index, name, column)
        return table


def _add_features(features: datasets.Features) -> datasets.Features:
    import datasets

    for name in ENGINEERED_FEATURES:
        features[name] = datasets.Value("float64")
    return features


def _vectorisable(state: DataState, cfg: DataConfig) -> bool:
    """The default features can run on Arrow: numeric columns hold numbers, the text has no null."""
    data = state.data if not state.parts else next(iter(state.parts.values()))
    schema = data.data.schema
    numbers = all(
        pa.types.is_integer(schema.field(c).type) or pa.types.is_floating(schema.field(c).type)
        for c in cfg.numeric_columns
    )
    texts = [state.data] if not state.parts else list(state.parts.values())
    return numbers and all(t.data.table[cfg.text_column].null_count == 0 for t in texts)


def streaming_moments(blocks: Iterable[np.ndarray]) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and population standard deviation of 2-D blocks (rows x columns), in one pass.

    Blocks are combined with Chan et al.'s parallel update (count, mean, sum of squared
    deviations) in float64, so the data is never in memory at once and the result matches a
    two-pass computation to rounding.
    """
    count, mean, m2 = 0, None, None
    for block in blocks:
        block = np.asarray(block, dtype=np.float64)
        n = block.shape[0]
        if n == 0:
            continue
        if mean is None:
            mean, m2 = np.zeros(block.shape[1]), np.zeros(block.shape[1])
        b_mean = block.mean(axis=0)
        b_m2 = ((block - b_mean) ** 2).sum(axis=0)
        delta = b_mean - mean
        total = count + n
        mean = mean + delta * (n / total)
        m2 = m2 + b_m2 + delta**2 * (count * n / total)
        count = total
    if mean is None:
        return 0, np.zeros(0), np.zeros(0)
    return count, mean, np.sqrt(m2 / count)


def fit_statistics(
    dataset: Any,
    columns: Sequence[str],
    batch_size: int = 65536,
    matrix_column: str | None = None,
    constant_ok: Sequence[str] = (),
) -> dict[str, Any]:
    """Step 5, ``fit_features``: mean and standard deviation of each column, in one streaming pass.

    The standard deviation is the population one (``ddof=0``, as scikit-learn's
    ``StandardScaler``).

    Args:
        dataset: a :class:`datasets.Dataset` (the train split, when the order is right).
        columns: the numeric columns (their names, when ``matrix_column`` is given).
        batch_size: rows per batch.
        matrix_column: read the values from this fixed-length list column instead of
            ``columns`` (an encoded ``features`` column).
        constant_ok: columns that may be constant (engineered features, which the user did not
            choose: e.g. a punctuation count on text without punctuation). They get ``std = 1``,
            so they standardise to 0 instead of failing; user columns still fail loudly.

    Returns:
        ``{"columns": [...], "mean": [...], "std": [...], "count": n}``.

    Raises:
        DataError: a column is constant (zero variance) or the data is empty.
    """
    columns = list(columns)
    # Arrow format, not numpy: datasets' numpy formatter narrows floats to float32.
    if matrix_column is not None:
        view = dataset.select_columns([matrix_column]).with_format("arrow")
        blocks = (_arrow_matrix(b[matrix_column], len(columns)) for b in view.iter(batch_size=batch_size))
    else:
        view = dataset.select_columns(columns).with_format("arrow")
        blocks = (
            np.stack([_arrow_vector(b[c]) for c in columns], axis=1) for b in view.iter(batch_size=batch_size)
        )
    count, mean, std = streaming_moments(blocks)
    if count == 0:
        raise DataError("no rows to fit statistics on", step="fit_features")
    allowed = set(constant_ok)
    std = std.copy()
    for index, (column, value, centre) in enumerate(zip(columns, std, mean)):
        if not value > 1e-12 * max(1.0, abs(centre)):
            if column in allowed:
                std[index] = 1.0
                continue
            raise DataError(
                f"the column is constant (every value seen is {centre:g}): zero variance, it cannot "
                "be standardised and carries no information; remove it from numeric_columns",
                step="fit_features",
                column=column,
            )
    return {"columns": columns, "mean": mean.tolist(), "std": std.tolist(), "count": int(count)}


def _arrow_vector(column: Any) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _arrow_matrix(column: Any, width: int) -> np.ndarray:
    flat = column.combine_chunks().flatten() if hasattr(column, "combine_chunks") else column.flatten()
    return np.asarray(flat.to_numpy(), dtype=np.float64).reshape(-1, width)


@STEPS.register(
    "engineer_features",
    takes=ROWS,
    provides=("features",),
    reads="data",
    writes_data=True,
    config=("text_column", "numeric_columns", "engineered_features", "overrides"),
)
def engineer_features(ctx: StepContext, state: DataState) -> StepResult:
    """Step 3: adds the engineered columns to every row (``ctx.hooks["engineer_features"]`` if overridden)."""
    from lightning_order.data.engine.tables import apply_tables

    cfg: DataConfig = ctx.config
    fp = fingerprint(ctx.fingerprint, CODE_VERSION)
    function = ctx.hooks.get("engineer_features")
    if function is None and _vectorisable(state, cfg):
        state = apply_tables(
            ctx, state, fp, "features", FeatureTable(cfg.text_column, cfg.numeric_columns), _add_features
        )
    else:
        default = functools.partial(
            engineer_batch, text_column=cfg.text_column, numeric_columns=cfg.numeric_columns
        )
        state = apply_rowwise(cfg, state, fp, function or default)
    return StepResult(
        state,
        fp,
        parts=dict(state.part_fps) if state.parts else {},
        stats={"features": list(cfg.engineered_features)},
    )


# Runs on raw rows (before encode) or on this rank's encoded shard (after shard, in setup: the
# deliberately wrong order); never on encoded data that is not yet sharded.
@STEPS.register(
    "fit_features",
    takes=frozenset({"rows", "shard"}),
    fits=("features",),
    reads="train",
    config=("numeric_columns", "engineered_features"),
    output="content",  # the statistics' fingerprint: ranks and a resumed run compare it
)
def fit_features(ctx: StepContext, state: DataState) -> StepResult:
    """Step 5: fits the features' mean and standard deviation on the data it is given (the train split)."""
    cfg: DataConfig = ctx.config
    names = list(ctx.feature_names)
    encoded = state.form in ("encoded", "shard")  # the features are already one matrix column
    stats = fit_statistics(
        train_data(state),
        names,
        matrix_column="features" if encoded else None,
        constant_ok=cfg.engineered_features,
    )
    return StepResult(
        replace(state, statistics=stats, standardised=False),
        fingerprint("statistics", stats),
        stats={"columns": names, "mean": stats["mean"], "std": stats["std"], "rows": stats["count"]},
    )

"""Model checks: was the model built for this data?

A model sized before the data was known has the wrong embedding table or input width. A crash
would be kind; often it is silent (a larger table trains fine on the wrong ids). The check
compares plain numbers, gathered by the callback from the module:

- ``model_dims``: the data dims in its ``hparams`` (every dim of every pipeline,
  :func:`lightning_order.pipelines.all_dims`: ``vocab_size``, ``num_classes``, ``block_size``,
  ...), ``embedding_rows`` (rows of its token embedding) and ``feature_in`` (input width of the
  layer fed by ``features``), whichever exist;
- ``data_dims``: the datamodule's ``dims`` (exact);
- ``observed``: what sampled batches show when there are no dims (a plain datamodule):
  ``max_token_id``, ``num_features`` (the width of ``features``), ``max_label``. These are lower
  bounds, so only an impossible model is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_order.pipelines import all_dims
from lightning_order.rules import Violation

__all__ = ["check_model_dims"]

#: Dims a model accepts at any value: the classifier pools over sequences of any length.
_ANY_VALUE = frozenset({"max_length"})
#: Layer shapes read off a module: (model key, the data dim it must equal, what the number is).
_LAYERS: tuple[tuple[str, str, str], ...] = (
    ("embedding_rows", "vocab_size", "token embedding rows"),
    ("feature_in", "num_features", "input width of the features layer"),
)


def _compared() -> list[tuple[str, str, str]]:
    """(model key, data key, what) for every dim a model is built from, each dim's layers after it."""
    rows = []
    for dim in all_dims():
        if dim not in _ANY_VALUE:
            rows.append((dim, dim, f"hparams.{dim}"))
        rows += [layer for layer in _LAYERS if layer[1] == dim]
    return rows


def check_model_dims(
    model_dims: Mapping[str, Any],
    data_dims: Mapping[str, Any] | None = None,
    *,
    observed: Mapping[str, Any] | None = None,
) -> list[Violation]:
    """``init-before-data``: the model's dims disagree with the data's.

    Args:
        model_dims: what the model was built with (see the module docstring); ``None`` values
            and missing keys are skipped.
        data_dims: the datamodule's dims, compared for equality.
        observed: what sampled batches show, compared as lower bounds.

    Returns:
        One violation listing every disagreement, or nothing.
    """
    data = {k: v for k, v in (data_dims or {}).items() if v is not None}
    seen = {k: v for k, v in (observed or {}).items() if v is not None}
    problems: list[str] = []
    differing: dict[str, tuple[Any, Any]] = {}
    for model_key, data_key, what in _compared():
        model_value = model_dims.get(model_key)
        if model_value is None:
            continue
        if model_key == "embedding_rows" and "padded_vocab_size" in data:
            data_key = "padded_vocab_size"  # a language model's table has the padded rows
        if data_key in data and int(model_value) != int(data[data_key]):
            problems.append(f"{what} is {model_value}, the data's {data_key} is {data[data_key]}")
            differing[model_key] = (model_value, data[data_key])
            continue
        if data_key in data:
            continue
        # No dims from the datamodule: what the batches show bounds what the model must accept.
        if (
            data_key == "vocab_size"
            and "max_token_id" in seen
            and int(model_value) <= int(seen["max_token_id"])
        ):
            problems.append(f"{what} is {model_value}, but the batches hold token id {seen['max_token_id']}")
            differing[model_key] = (model_value, f"> {seen['max_token_id']}")
        elif (
            data_key == "num_features"
            and "num_features" in seen
            and int(model_value) != int(seen["num_features"])
        ):
            problems.append(
                f"{what} is {model_value}, but the batches' features are {seen['num_features']} wide"
            )
            differing[model_key] = (model_value, seen["num_features"])
        elif data_key == "num_classes" and "max_label" in seen and int(model_value) <= int(seen["max_label"]):
            problems.append(f"{what} is {model_value}, but the batches hold label {seen['max_label']}")
            differing[model_key] = (model_value, f"> {seen['max_label']}")
    if not problems:
        return []
    return [
        Violation(
            "init-before-data",
            ("init_model", "encode"),
            "the model was built for other data: " + "; ".join(problems),
            details={"differing": differing},
        )
    ]

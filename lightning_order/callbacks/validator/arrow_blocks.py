"""Both splits as row selections of one Arrow table of packed blocks: a split made after packing.

Gathering only (the judgement is :mod:`lightning_order.checks.packed_split`). run_clm-style
pipelines pack with ``datasets``: ``map(group_texts)`` turns the documents into a table of
equal-length blocks cut from one token stream, in stream order. When the blocks are then
shuffled and ``train_test_split``, both splits are ``datasets.Dataset`` objects whose index
mappings select disjoint rows of that *same* table; a correct pipeline splits the text first,
so each split packs its own table. The shared table is exact lineage: row ``i`` of it is the
stream's tokens ``[i * L, (i + 1) * L)``, and the packed-split check asks which validation
blocks have a train block next to them in the same document.

Read duck-typed: ``datasets`` is never imported here (an object is only taken for a dataset
when its type comes from that package, already imported by the user's code).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["column_stream", "table_blocks"]

#: The column holding each block's token ids (run_clm's, and the Hugging Face convention).
IDS = "input_ids"


def _is_arrow_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("datasets.") and hasattr(obj, "data") and hasattr(obj, "_indices")


def _rows(dataset: Any) -> np.ndarray | None:
    """The table rows a dataset selects (its index mapping), or ``None`` when it selects the whole table."""
    mapping = getattr(dataset, "_indices", None)  # datasets exposes no public accessor for it
    if mapping is None:
        return None
    return np.asarray(mapping.column("indices").to_numpy(), dtype=np.int64)


def _same_table(train: Any, val: Any) -> bool:
    """The same Arrow table under both splits: one object, the same cache files, or equal tables.

    In memory, ``select`` gives each split its own copy of the table: equal content (same row
    count, same values) is then the lineage; separately packed splits never have equal tables.
    """
    if train.data is val.data:
        return True
    files = [f.get("filename") for f in getattr(train, "cache_files", None) or []]
    if files:
        return files == [f.get("filename") for f in getattr(val, "cache_files", None) or []]
    first, second = getattr(train.data, "table", train.data), getattr(val.data, "table", val.data)
    return bool(first.num_rows == second.num_rows and first.equals(second))


def _blocks(table: Any) -> tuple[np.ndarray, int] | None:
    """``(stream, L)``: the table's ``input_ids`` rows joined in row order, when every row has ``L`` tokens.

    Rows padded to one length (an ``attention_mask`` with zeros) are documents, not blocks: ``None``.
    """
    if IDS not in table.column_names:
        return None
    ids = table.column(IDS).combine_chunks()
    offsets = getattr(ids, "offsets", None)
    if offsets is None:
        return None
    lengths = np.diff(np.asarray(offsets.to_numpy(), dtype=np.int64))
    if not lengths.size or lengths[0] < 2 or np.any(lengths != lengths[0]):
        return None
    if "attention_mask" in table.column_names:
        mask = table.column("attention_mask").combine_chunks().flatten().to_numpy()
        if not np.all(np.asarray(mask) == 1):
            return None
    stream = np.asarray(ids.flatten().to_numpy(), dtype=np.int64)
    return stream, int(lengths[0])


def table_blocks(train: Any, val: Any) -> dict[str, Any] | None:
    """Both splits as disjoint row selections of one table of packed blocks, or ``None``.

    Args:
        train: the train split's dataset.
        val: the validation split's dataset.

    Returns:
        ``{"stream", "train_starts", "val_starts", "window", "stride", "whole"}`` as
        :func:`~lightning_order.callbacks.validator.tokens.subset_windows` gives them: every
        row of both splits (``whole``), blocks ``L`` tokens long and ``L`` apart.
    """
    if not _is_arrow_dataset(train) or not _is_arrow_dataset(val) or not _same_table(train, val):
        return None
    train_rows, val_rows = _rows(train), _rows(val)
    if train_rows is None or val_rows is None or not train_rows.size or not val_rows.size:
        return None
    if np.intersect1d(train_rows, val_rows).size:  # not a split of the rows: another check's business
        return None
    found = _blocks(train.data)
    if found is None:
        return None
    stream, length = found
    return {
        "stream": stream,
        "train_starts": train_rows * length,
        "val_starts": val_rows * length,
        "window": length,
        "stride": length,
        "whole": True,
    }


def column_stream(dataset: Any) -> tuple[np.ndarray, int] | None:
    """``(tokens, L)``: a ``datasets.Dataset`` of packed blocks read as one stream, rows in the split's order.

    The ``input_ids`` column is read through ``with_format("arrow")``, which applies the split's
    index mapping, so only the split's own rows are read. Rows packed in order (``group_texts``)
    join back into the stream they were cut from; rows shuffled meet at random seams, where an
    n-gram across two rows matches nothing (the overlap check may miss there, never alarm).

    Returns:
        ``None`` unless ``dataset`` is a ``datasets.Dataset`` of equal-length, unpadded rows.
    """
    if not _is_arrow_dataset(dataset) or not len(dataset):
        return None
    try:
        table = dataset.with_format("arrow")[:]
    except Exception:  # a dataset that cannot be read as Arrow: no stream
        return None
    return _blocks(table)

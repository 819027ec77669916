"""Step 4, ``split``: train/validation by a hash of the cleaned key (or a group column).

A row's split is a pure function of its key and the seed: rows with the same key always land in
the same split, and adding rows never moves existing ones. The key hash (xxh3, 64 bits) is also
kept as the ``key_hash`` column (seed-independent) so leakage checks compare keys cheaply.

A text key is its cleaned text reduced to its word sequence (lower-cased runs of letters and
digits): near-duplicates that cleaning leaves apart by a stray ``&``, quote or ``!`` then share
a key and land in the same split, instead of leaking across it. A group key is used as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lightning_order.data.engine.keys import KEY_HASH_COLUMN, hash_keys, key_bytes, val_mask
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.registry import STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["CARRIED_KEY_HASH", "KEY_HASH_COLUMN", "split"]

#: The parts carry each row's unseeded key hash from the split to ``encode`` (which stores it as
#: :data:`KEY_HASH_COLUMN` while the keys are those the split hashed).
CARRIED_KEY_HASH = "__lightning_order_key_hash"


@STEPS.register(
    "split",
    takes=ROWS,
    consumes=("clean", "engineer_features"),
    reads="data",
    writes_data=True,
    partitions=("train", "val"),
    config=("val_fraction", "seed", "text_column", "group_column", "label_column"),
)
def split(ctx: StepContext, state: DataState) -> StepResult:
    """Step 4: splits the rows into ``train`` and ``val`` by key; every val label must occur in train."""
    import datasets  # imported when data is split (a cache hit needs none)

    from lightning_order.data.engine.tables import batches, write_split

    cfg: DataConfig = ctx.config
    key = cfg.key_column
    data = state.data
    flags, train_labels, val_labels = [], set(), set()

    def assigned(tables: Iterable[pa.Table]) -> Iterator[tuple[pa.Table, pa.Table]]:
        for table in tables:
            values = key_bytes(table[key], text=cfg.group_column is None)
            f = val_mask(hash_keys(values, seed=cfg.seed), cfg.val_fraction)
            # The unseeded hash encode stores as key_hash, computed from the same bytes now.
            table = table.append_column(CARRIED_KEY_HASH, pa.array(hash_keys(values).view(np.int64)))
            flags.append(f)
            labels = table[cfg.label_column]
            train_labels.update(pc.unique(labels.filter(pa.array(~f))).to_pylist())
            val_labels.update(pc.unique(labels.filter(pa.array(f))).to_pylist())
            yield table.filter(pa.array(~f)), table.filter(pa.array(f))

    params = {"val_fraction": cfg.val_fraction, "seed": cfg.seed, "key": key}
    fp = fingerprint(ctx.fingerprint, CODE_VERSION)
    # One pass: each batch is assigned and written, in row order, to the train and val files
    # (contiguous Arrow: later steps read it sequentially, and no index mapping is kept).
    features = data.features.copy()
    features[CARRIED_KEY_HASH] = datasets.Value("int64")
    written = write_split(assigned(batches(data)), features, ctx.work, fp[:8])
    flag = np.concatenate(flags) if flags else np.zeros(0, dtype=bool)
    digest = fingerprint(fp, hashlib.sha256(np.packbits(flag).tobytes()).hexdigest())
    train_idx, val_idx = np.flatnonzero(~flag), np.flatnonzero(flag)
    for name, idx in (("train", train_idx), ("val", val_idx)):
        if len(idx) == 0:
            raise DataError(
                f"the {name} split is empty ({len(flag)} rows, val_fraction={cfg.val_fraction}); "
                "use more data or another val_fraction",
                step="split",
                column=key,
            )
    if None in train_labels or None in val_labels:
        raise DataError(
            "some labels are missing (None); drop or label those rows", step="split", column=cfg.label_column
        )
    unseen = val_labels - train_labels
    if unseen:
        raise DataError(
            f"label(s) {sorted(map(str, unseen))} appear in validation but never in train: the model "
            "cannot learn them; use more data, another seed, or drop those rows",
            step="split",
            column=cfg.label_column,
        )
    parts = dict(zip(("train", "val"), written))
    part_fps = {"train": fingerprint(digest, "train"), "val": fingerprint(digest, "val")}
    labels = tuple(sorted(train_labels, key=lambda v: (str(type(v)), v)))
    return StepResult(
        replace(state, data=None, parts=parts, part_fps=part_fps, label_names=labels),
        fp,
        parts=part_fps,
        params=params,
        stats={"train_rows": len(train_idx), "val_rows": len(val_idx)},
    )

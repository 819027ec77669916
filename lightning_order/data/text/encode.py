"""Step 7, ``encode``: token ids, attention masks, standardised features and label ids.

One pass over Arrow batches turns the cleaned rows into the batch contract of
docs/architecture.md, written straight into one Arrow file per part (no ``datasets.map`` writer).
The tokenizer truncates to ``max_length`` in Rust (``encode_batch`` through
:func:`~.vocab.encode_bounded`); the padded ``input_ids`` and ``attention_mask`` matrices are
filled with numpy from the unpadded ids (what ``encode_batch`` with padding gives, without
converting the padding to Python lists and back); features are
standardised with the statistics fitted on the train split (or stored raw when they are fitted
later, per shard, in a deliberately wrong order). The ``key_hash`` column keeps the hash of the
cleaned split key so leakage checks never rescan text.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer

from lightning_order.data.engine.keys import KEY_HASH_COLUMN, key_hash_array, key_hashes
from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.text.config import CODE_VERSION, DataConfig
from lightning_order.data.text.registry import STEPS
from lightning_order.data.text.split import CARRIED_KEY_HASH
from lightning_order.data.text.vocab import encode_bounded
from lightning_order.ledger import fingerprint

if TYPE_CHECKING:  # datasets is imported when data is encoded (a cache hit needs none)
    import datasets

__all__ = ["Encoder", "encode", "encoded_features"]

#: Rows per ``encode_batch`` call: large enough for the tokenizer's threads, small enough that
#: the batch's ``Encoding`` objects stay a few MB.
_ENCODE_ROWS = 8192


def encoded_features(max_length: int, num_features: int) -> datasets.Features:
    """The Arrow schema of an encoded split (compact storage; torch format widens to long/float)."""
    import datasets

    return datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32"), length=max_length),
            "attention_mask": datasets.Sequence(datasets.Value("int8"), length=max_length),
            "features": datasets.Sequence(datasets.Value("float32"), length=num_features),
            "labels": datasets.Value("int64"),
            KEY_HASH_COLUMN: datasets.Value("int64"),
        }
    )


class Encoder:
    """A picklable batch function for ``Dataset.map`` (safe under ``num_proc``).

    Args:
        tokenizer_json: the trained tokenizer, serialised (``Tokenizer.to_str()``).
        text_column: the (cleaned) text column.
        key_column: the split key column (text or group column).
        feature_columns: the numeric and engineered feature columns, in order.
        label_column: the label column.
        label_map: label value -> class id.
        max_length: pad/truncate length.
        mean: per-feature mean, or ``None`` to keep raw features.
        std: per-feature standard deviation, or ``None``.
    """

    def __init__(
        self,
        tokenizer_json: str,
        text_column: str,
        key_column: str,
        feature_columns: Sequence[str],
        label_column: str,
        label_map: Mapping[Any, int],
        max_length: int,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
    ) -> None:
        self.tokenizer_json = tokenizer_json
        self.text_column = text_column
        self.key_column = key_column
        self.feature_columns = list(feature_columns)
        self.label_column = label_column
        self.label_map = dict(label_map)
        self.max_length = max_length
        self.mean = None if mean is None else np.asarray(mean, dtype=np.float64)
        self.std = None if std is None else np.asarray(std, dtype=np.float64)
        self._tokenizer: Tokenizer | None = None
        #: Take ``key_hash`` from the split's :data:`~.split.CARRIED_KEY_HASH` column (set by the
        #: step when no step changed the data since the split, so the keys are the ones it hashed).
        self.carried = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tokenizer"] = None  # rebuilt from JSON in each worker process
        return state

    def tokenizer(self) -> Tokenizer:
        """The tokenizer with truncation to ``max_length`` (padding is applied by :meth:`token_arrays`)."""
        if self._tokenizer is None:
            tok = Tokenizer.from_str(self.tokenizer_json)
            tok.no_padding()
            tok.enable_truncation(max_length=self.max_length)
            self._tokenizer = tok
        return self._tokenizer

    def pad_id(self) -> int:
        """The id padding uses (``[PAD]``'s, else 0)."""
        pad = self.tokenizer().token_to_id("[PAD]")
        return 0 if pad is None else pad

    def token_arrays(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``input_ids`` (int32) and ``attention_mask`` (int8), ``len(texts)`` x ``max_length``, right-padded."""
        ids = [e.ids for e in encode_bounded(self.tokenizer(), texts, self.max_length)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        mask = np.arange(self.max_length) < lengths[:, None]
        matrix = np.full((len(ids), self.max_length), self.pad_id(), dtype=np.int32)
        matrix[mask] = np.fromiter(
            itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())
        )
        return matrix, mask.astype(np.int8)

    def _features(self, columns: Sequence[Any], rows: int) -> np.ndarray:
        if self.feature_columns:
            feats = np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=1)
        else:
            feats = np.zeros((rows, 0))
        if self.mean is not None and self.std is not None:
            feats = (feats - self.mean) / self.std
        return feats.astype(np.float32)

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, Any]:
        ids, mask = self.token_arrays(batch[self.text_column])
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "features": self._features([batch[c] for c in self.feature_columns], len(ids)),
            "labels": np.asarray([self.label_map[v] for v in batch[self.label_column]], dtype=np.int64),
            KEY_HASH_COLUMN: key_hashes(batch[self.key_column], text=self.key_column == self.text_column),
        }

    def _label_ids(self, column: Any) -> np.ndarray:
        """Class ids of a label column: by Arrow look-up, or by ``label_map`` where types differ."""
        try:
            names = pa.array(list(self.label_map), type=column.type)
            ids = pc.index_in(column, value_set=names)
        except (pa.ArrowException, TypeError, ValueError):
            ids = None
        if ids is None or ids.null_count:  # not all found: the dict says why (a KeyError, as before)
            return np.asarray([self.label_map[v] for v in column.to_pylist()], dtype=np.int64)
        order = np.asarray(list(self.label_map.values()), dtype=np.int64)
        return order[np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64)]

    def encode_table(self, table: pa.Table) -> pa.Table:
        """The encoded columns of an Arrow batch (the same values as :meth:`__call__`), as Arrow arrays."""
        ids, mask = self.token_arrays(table[self.text_column].to_pylist())
        columns = [table[c].to_numpy(zero_copy_only=False) for c in self.feature_columns]
        feats = self._features(columns, len(ids))
        if self.carried and CARRIED_KEY_HASH in table.column_names:
            hashes = table[CARRIED_KEY_HASH]
        else:
            hashes = key_hash_array(table[self.key_column], text=self.key_column == self.text_column).view(
                np.int64
            )
        labels = self._label_ids(table[self.label_column])
        return pa.table(
            {
                "input_ids": _fixed(ids),
                "attention_mask": _fixed(mask),
                "features": _fixed(feats),
                "labels": pa.array(labels),
                KEY_HASH_COLUMN: hashes if isinstance(hashes, pa.ChunkedArray) else pa.array(hashes),
            }
        )


def _fixed(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """A rows x width matrix as a fixed-size list array (``datasets.Sequence(..., length=width)``)."""
    rows, width = matrix.shape
    values = pa.array(np.ascontiguousarray(matrix).reshape(-1))
    if width == 0:  # no features: Arrow cannot infer the length of zero-width lists from their values
        return pa.array([[]] * rows, type=pa.list_(values.type, 0))
    return pa.FixedSizeListArray.from_arrays(values, type=pa.list_(values.type, width))


@STEPS.register(
    "encode",
    takes=ROWS,
    makes="encoded",
    uses=("parts", "tokenizer"),
    consumes=("fit_features", "build_vocab"),
    reads="none",
    config=("text_column", "group_column", "label_column", "numeric_columns", "max_length"),
)
def encode(ctx: StepContext, state: DataState) -> StepResult:
    """Step 7: encodes every part; features are standardised when statistics were fitted before."""
    from lightning_order.data.engine.tables import batches, write_dataset

    cfg: DataConfig = ctx.config
    names = list(ctx.feature_names)
    stats = state.statistics
    encoder = Encoder(
        state.tokenizer.to_str(),
        cfg.text_column,
        cfg.key_column,
        names,
        cfg.label_column,
        {v: i for i, v in enumerate(state.label_names)},
        cfg.max_length,
        mean=None if stats is None else stats["mean"],
        std=None if stats is None else stats["std"],
    )
    encoder.carried = state.lineage[0] == "split"
    fp = fingerprint(ctx.fingerprint, CODE_VERSION, dict(state.part_fps))
    schema = encoded_features(cfg.max_length, len(names))
    part_fps, encoded = {}, {}
    for name, part in state.parts.items():
        part_fps[name] = fingerprint(fp, name)
        encoded[name] = write_dataset(
            (encoder.encode_table(t) for t in batches(part, size=_ENCODE_ROWS)),
            schema,
            ctx.work,
            f"encode-{name}",
        )
    if stats is None:  # fitted later (per shard) or never: the features are stored raw
        stats = {"columns": names, "mean": None, "std": None, "count": 0}
    return StepResult(
        replace(
            state, parts=encoded, part_fps=part_fps, statistics=stats, standardised=stats["mean"] is not None
        ),
        fp,
        parts=part_fps,
        params={"max_length": cfg.max_length},
        stats={f"{k}_rows": len(v) for k, v in encoded.items()},
    )

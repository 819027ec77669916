"""Step 7, ``encode``: token ids, attention masks, standardised features and label ids.

One batched map turns the cleaned rows into the batch contract of docs/architecture.md. The
tokenizer pads and truncates to ``max_length`` in Rust (``encode_batch``); features are
standardised with the statistics fitted on the train split (or stored raw when they are fitted
later, per shard, in a deliberately wrong order). The ``key_hash`` column keeps the hash of the
cleaned split key so leakage checks never rescan text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import datasets
import numpy as np
from tokenizers import Tokenizer

from lightning_order.data.config import CODE_VERSION, DataConfig
from lightning_order.data.split import KEY_HASH_COLUMN, key_hashes
from lightning_order.data.steps import ROWS, STEPS, DataState, StepContext, StepResult, map_kwargs
from lightning_order.data.vocab import encode_bounded
from lightning_order.ledger import fingerprint

__all__ = ["Encoder", "encode", "encoded_features"]


def encoded_features(max_length: int, num_features: int) -> datasets.Features:
    """The Arrow schema of an encoded split (compact storage; torch format widens to long/float)."""
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

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tokenizer"] = None  # rebuilt from JSON in each worker process
        return state

    def tokenizer(self) -> Tokenizer:
        """The tokenizer with padding and truncation to ``max_length``."""
        if self._tokenizer is None:
            tok = Tokenizer.from_str(self.tokenizer_json)
            pad_id = tok.token_to_id("[PAD]")
            tok.enable_padding(
                pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]", length=self.max_length
            )
            tok.enable_truncation(max_length=self.max_length)
            self._tokenizer = tok
        return self._tokenizer

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, Any]:
        encodings = encode_bounded(self.tokenizer(), batch[self.text_column], self.max_length)
        ids = np.asarray([e.ids for e in encodings], dtype=np.int32).reshape(-1, self.max_length)
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int8).reshape(-1, self.max_length)
        if self.feature_columns:
            feats = np.stack([np.asarray(batch[c], dtype=np.float64) for c in self.feature_columns], axis=1)
        else:
            feats = np.zeros((len(ids), 0))
        if self.mean is not None and self.std is not None:
            feats = (feats - self.mean) / self.std
        labels = np.asarray([self.label_map[v] for v in batch[self.label_column]], dtype=np.int64)
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "features": feats.astype(np.float32),
            "labels": labels,
            KEY_HASH_COLUMN: key_hashes(batch[self.key_column], text=self.key_column == self.text_column),
        }


@STEPS.register(
    "encode",
    takes=ROWS,
    makes="encoded",
    needs=("split", "build_vocab"),
    after=("clean", "engineer_features"),
    consumes=("fit_features", "build_vocab"),
    reads="none",
)
def encode(ctx: StepContext, state: DataState) -> StepResult:
    """Step 7: encodes every part; features are standardised when statistics were fitted before."""
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
    fp = fingerprint("encode", CODE_VERSION, dict(ctx.inputs), cfg.max_length, dict(state.part_fps))
    schema = encoded_features(cfg.max_length, len(names))
    part_fps, encoded = {}, {}
    for name, part in state.parts.items():
        part_fps[name] = fingerprint(fp, name)
        encoded[name] = part.map(
            encoder, remove_columns=part.column_names, features=schema, **map_kwargs(cfg, part_fps[name])
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

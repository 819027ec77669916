"""Real tabular data with a categorical column, for the label-encoding tests.

One row per public function or method of the standard-library modules of the built-in LM corpus
(:data:`lightning_order.data.lm.corpus.STDLIB_CORPUS_MODULES`), read with :mod:`inspect`:
the category is the row's module (about 150 of them, a few to a few hundred rows each), the
label whether its docstring says what it returns (each docstring once) (``"return"`` in it: modules differ a lot in
that, so a target encoding of the module carries real label information), and four natural
features (log of the docstring's length, the number of parameters, its words, its share of
capitals). Validation rows are chosen by
a hash of the qualified name. Everything is a pure function of the Python version.

:class:`FunctionsData` serves the table as a user's LightningDataModule would (a ``TensorDataset``
per split; ``shard=True`` keeps only this rank's share of the train rows, as a hand-written DDP
pipeline may), :class:`FunctionsClassifier` is a small MLP on it.
"""

from __future__ import annotations

import importlib
import inspect
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_order.data.lm.corpus import STDLIB_CORPUS_MODULES

#: One-line docstrings ("Return self.") are left out: many of them share every natural feature.
_MIN_CHARS = 80


@dataclass(frozen=True)
class Rows:
    """The table: ``module`` (category index), ``label`` (0/1), natural features, ``is_val``."""

    module: np.ndarray
    label: np.ndarray
    natural: np.ndarray
    is_val: np.ndarray


def _signature_size(obj: object) -> float:
    try:
        return float(len(inspect.signature(obj).parameters))
    except (TypeError, ValueError):
        return 0.0


@lru_cache(maxsize=1)
def stdlib_rows(val_share: float = 0.2) -> Rows:
    """The rows (cached: building them imports the modules)."""
    modules, labels, natural, names = [], [], [], []
    seen: set[str] = set()  # an inherited docstring is one row: repeats would straddle the split
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, name in enumerate(STDLIB_CORPUS_MODULES):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            for attr, obj in sorted(vars(module).items()):
                if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                    continue
                members = [(attr, obj)]
                if inspect.isclass(obj):
                    members += [
                        (f"{attr}.{m}", f) for m, f in sorted(vars(obj).items()) if not m.startswith("_")
                    ]
                for qualname, member in members:
                    doc = inspect.getdoc(member) if callable(member) else None
                    if not doc or len(doc) < _MIN_CHARS or doc in seen:
                        continue
                    seen.add(doc)
                    modules.append(index)
                    labels.append(int("return" in doc.lower()))
                    natural.append(
                        [
                            math.log(len(doc)),
                            _signature_size(member),
                            float(len(doc.split())),
                            sum(c.isupper() for c in doc) / len(doc),
                        ]
                    )
                    names.append(f"{name}.{qualname}")
    hashes = np.array([xxhash.xxh3_64_intdigest(n.encode()) for n in names], dtype=np.uint64)
    is_val = (hashes % 1000) < int(val_share * 1000)
    return Rows(np.array(modules), np.array(labels), np.array(natural, dtype=np.float64), is_val)


def target_encoding(rows: Rows, fit_on: np.ndarray, smoothing: float = 1.0) -> np.ndarray:
    """Each row's module encoded as its smoothed share of label 1 over the rows ``fit_on`` selects."""
    prior = rows.label[fit_on].mean()
    positives = np.bincount(rows.module[fit_on], weights=rows.label[fit_on], minlength=rows.module.max() + 1)
    counts = np.bincount(rows.module[fit_on], minlength=rows.module.max() + 1)
    return ((positives + smoothing * prior) / (counts + smoothing))[rows.module]


def feature_table(rows: Rows, leak: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(train_x, train_y, val_x, val_y)``: the natural features and the module's target encoding,
    fitted on train + validation rows (``leak``) or on the train rows only."""
    encoded = target_encoding(rows, np.ones_like(rows.is_val) if leak else ~rows.is_val)
    x = np.column_stack([rows.natural, encoded]).astype(np.float32)
    return x[~rows.is_val], rows.label[~rows.is_val], x[rows.is_val], rows.label[rows.is_val]


class FunctionsData(pl.LightningDataModule):
    """The table with the module's target encoding, fitted on train + validation rows (``leak``) or not."""

    def __init__(self, leak: bool, shard: bool = False) -> None:
        super().__init__()
        self.leak, self.shard = leak, shard

    def setup(self, stage: str) -> None:
        tx, ty, vx, vy = feature_table(stdlib_rows(), leak=self.leak)
        if self.shard:  # this rank's rows only: the validator must join the shards
            rank, world = self.trainer.global_rank, self.trainer.world_size
            tx, ty = tx[rank::world], ty[rank::world]
        self.train = TensorDataset(torch.from_numpy(tx), torch.from_numpy(ty))
        self.val = TensorDataset(torch.from_numpy(vx), torch.from_numpy(vy))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=64, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=256)


class FunctionsClassifier(pl.LightningModule):
    """A small MLP on the table's five columns."""

    def __init__(self, features: int = 5) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

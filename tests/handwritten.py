"""A hand-written text pipeline, as a Lightning user writes one, and its classic order mistakes.

Plain ``LightningDataModule`` + ``LightningModule`` (of either namespace: :func:`build`), on real
text: paragraphs of Python standard library docstrings (``inspect.getdoc``), wrapped in the HTML
markup a scraped corpus carries, labelled by module group, with three raw numeric columns under
the batch key ``numeric``. The correct pipeline cleans, splits by a hash of the cleaned text (so
duplicates stay on one side), fits the numeric statistics and a capped word-level vocabulary on
the train split only, and encodes.

Each mistake is a subclass that changes only what the mistake changes; the lightning_order lines
it needs (its glue) are the class-body lines that mention ``record_step``: :func:`glue_lines`
counts them. Used by tests/integration/test_handwritten_pipelines.py and
tests/distributed/ddp_scripts/handwritten_ddp.py.
"""

from __future__ import annotations

import collections
import html
import importlib
import inspect
import re
import warnings
from functools import cache
from types import ModuleType
from typing import Any

import pytorch_lightning
import torch
import xxhash
from torch import nn
from torch.utils.data import DataLoader, random_split

from lightning_order import record_step

MODULES = (
    "os", "re", "json", "collections", "itertools", "functools", "string", "textwrap", "pathlib",
    "datetime", "argparse", "logging", "socket", "threading", "subprocess", "random", "statistics",
    "decimal", "fractions", "csv", "sqlite3", "zipfile", "shutil", "tempfile", "io",
)  # fmt: skip
MAX_LENGTH = 48
MAX_VOCAB = 400  # a capped word-level vocabulary: rare words are [UNK], as in most real pipelines
PAD, UNK = "[PAD]", "[UNK]"


@cache
def docs_rows() -> tuple[tuple[str, int], ...]:
    """``(raw_html, label)`` per docstring paragraph of the standard library modules above."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, name in enumerate(MODULES):
            module = importlib.import_module(name)
            for attr in sorted(dir(module)):
                obj = getattr(module, attr, None)
                if attr.startswith("_") or not callable(obj) or getattr(obj, "__module__", None) != name:
                    continue
                members = [obj]
                if inspect.isclass(obj):
                    members += [getattr(obj, a) for a in sorted(vars(obj)) if not a.startswith("_")]
                for member in members:
                    for para in (inspect.getdoc(member) or "").split("\n\n"):
                        para = " ".join(para.split())
                        if len(para.split()) >= 4:
                            rows.append((f"<p>{html.escape(para)}</p><br/>", i % 4))
    return tuple(rows)


def clean_text(raw: str) -> str:
    """Markup out, entities decoded, lower case, single spaces."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).lower().split())


def words(text: str) -> list[str]:
    return re.findall(r"[a-z_]+|\d+|[^\sa-z_\d]", text)


def numeric(text: str) -> list[float]:
    return [float(len(text)), float(len(text.split())), float(sum(c.isdigit() for c in text))]


def build(ns: ModuleType = pytorch_lightning) -> tuple[type, type]:
    """The correct ``(DocsData, DocsClassifier)`` on ``ns`` (``pytorch_lightning`` or ``lightning.pytorch``)."""

    class DocsData(ns.LightningDataModule):
        """The correct hand-written pipeline: clean -> split -> fit statistics and vocab on train -> encode."""

        def __init__(self, batch_size: int = 32) -> None:
            super().__init__()
            self.batch_size = batch_size
            self.vocab: dict[str, int] = {}

        # -- the steps, as plain methods -------------------------------------------------
        def load(self) -> list[dict[str, Any]]:
            return [{"text": text, "label": label} for text, label in docs_rows()]

        def clean(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{**row, "text": clean_text(row["text"])} for row in rows]

        def split(self, rows: list[dict[str, Any]]) -> tuple[list, list]:
            to_val = [xxhash.xxh64_intdigest(row["text"].encode()) % 5 == 0 for row in rows]
            return [r for r, v in zip(rows, to_val) if not v], [r for r, v in zip(rows, to_val) if v]

        def fit_features(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
            values = torch.tensor([numeric(row["text"]) for row in rows])
            return {"mean": values.mean(0), "std": values.std(0) + 1e-6}

        def build_vocab(self, rows: list[dict[str, Any]]) -> dict[str, int]:
            counts = collections.Counter(w for row in rows for w in words(row["text"]))
            kept = [w for w, _ in counts.most_common(MAX_VOCAB)]
            return {PAD: 0, UNK: 1, **{w: i + 2 for i, w in enumerate(kept)}}

        def encode(self, rows: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
            out = []
            for row in rows:
                ids = [self.vocab.get(w, self.vocab[UNK]) for w in words(row["text"])][:MAX_LENGTH]
                out.append(
                    {
                        "input_ids": torch.tensor(ids + [self.vocab[PAD]] * (MAX_LENGTH - len(ids))),
                        "numeric": (torch.tensor(numeric(row["text"])) - self.stats["mean"])
                        / self.stats["std"],
                        "labels": torch.tensor(row["label"]),
                    }
                )
            return out

        # -- Lightning's contract --------------------------------------------------------
        def setup(self, stage: str) -> None:
            rows = self.clean(self.load())
            train, val = self.split(rows)
            self.stats = self.fit_features(train)
            self.vocab = self.build_vocab(train)
            self.train_set, self.val_set = self.encode(train), self.encode(val)

        @property
        def vocab_size(self) -> int:
            return len(self.vocab)

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.val_set, batch_size=self.batch_size)

    class DocsClassifier(ns.LightningModule):
        """Mean of token embeddings and a projection of the numeric columns, then a linear head."""

        def __init__(self, vocab_size: int, num_numeric: int = 3, num_classes: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.embedding = nn.Embedding(vocab_size, 16, padding_idx=0)
            self.numeric_proj = nn.Linear(num_numeric, 8)
            self.head = nn.Linear(24, num_classes)

        def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            pooled = self.embedding(batch["input_ids"]).mean(1)
            return self.head(torch.cat([pooled, self.numeric_proj(batch["numeric"])], -1))

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            loss = nn.functional.cross_entropy(self(batch), batch["labels"])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
            self.log("val_loss", nn.functional.cross_entropy(self(batch), batch["labels"]), sync_dist=True)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return DocsData, DocsClassifier


DocsData, DocsClassifier = build()


def glue_lines(cls: type) -> int:
    """The lightning_order lines a datamodule needed: class-body lines that mention ``record_step``."""
    return sum("record_step(" in line for line in inspect.getsource(cls).splitlines())


# -- the correct pipeline, every step recorded (shows the recording raises no false alarm) ---------
class RecordedDocsData(DocsData):
    load = record_step("load")(DocsData.load)
    clean = record_step("clean")(DocsData.clean)
    split = record_step("split")(DocsData.split)
    fit_features = record_step("fit_features")(DocsData.fit_features)
    build_vocab = record_step("build_vocab")(DocsData.build_vocab)


# -- the classic mistakes ----------------------------------------------------------------------
class RandomSplitData(DocsData):
    """``random_split`` in ``setup`` without a generator: every rank splits differently (Lightning #7728).

    The ranks' random states part ways in ``prepare_data``, which Lightning runs on rank 0 only
    (here: a random preview of a few rows, as a download or a cache check might draw).
    """

    def prepare_data(self) -> None:
        self.preview = torch.randperm(len(docs_rows()))[:5]

    def split(self, rows: list[dict[str, Any]]) -> tuple[list, list]:
        train, val = random_split(rows, [0.8, 0.2])
        return list(train), list(val)


class PerRankStatsData(DocsData):
    """Each rank fits the numeric statistics on its own shard of the train split, in ``setup``."""

    def fit_features(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        return super().fit_features(rows[rank::world])


class StatsBeforeSplitData(DocsData):
    """Mean and std computed on all rows, before the split: validation rows leak into the statistics."""

    split = record_step("split")(DocsData.split)
    fit_features = record_step("fit_features")(DocsData.fit_features)

    def setup(self, stage: str) -> None:
        rows = self.clean(self.load())
        self.stats = self.fit_features(rows)
        train, val = self.split(rows)
        self.vocab = self.build_vocab(train)
        self.train_set, self.val_set = self.encode(train), self.encode(val)


class RawVocabData(DocsData):
    """The vocabulary is trained on the raw text, markup and entities included; cleaning comes after."""

    clean = record_step("clean")(DocsData.clean)
    split = record_step("split")(DocsData.split)
    build_vocab = record_step("build_vocab")(DocsData.build_vocab)

    def setup(self, stage: str) -> None:
        train, val = self.split(self.load())
        self.vocab = self.build_vocab(train)
        train, val = self.clean(train), self.clean(val)
        self.stats = self.fit_features(train)
        self.train_set, self.val_set = self.encode(train), self.encode(val)


class NoDedupeData(DocsData):
    """A seeded random split and no deduplication anywhere: repeated paragraphs straddle the split."""

    def split(self, rows: list[dict[str, Any]]) -> tuple[list, list]:
        train, val = random_split(rows, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
        return list(train), list(val)


class LatePadData(DocsData):
    """The vocabulary has no pad token; the collate function adds one at the first batch, after the
    model was sized from ``len(vocab)``."""

    def build_vocab(self, rows: list[dict[str, Any]]) -> dict[str, int]:
        vocab = super().build_vocab(rows)
        return {w: i for i, w in enumerate(w for w in vocab if w != PAD)}

    def encode(self, rows: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
        stats = self.stats
        return [
            {
                "input_ids": [self.vocab.get(w, self.vocab[UNK]) for w in words(row["text"])][:MAX_LENGTH],
                "numeric": (torch.tensor(numeric(row["text"])) - stats["mean"]) / stats["std"],
                "labels": torch.tensor(row["label"]),
            }
            for row in rows
        ]

    def collate(self, items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        pad = self.vocab.setdefault(PAD, len(self.vocab))  # the pad token, added late
        ids = [item["input_ids"] + [pad] * (MAX_LENGTH - len(item["input_ids"])) for item in items]
        return {
            "input_ids": torch.tensor(ids),
            "numeric": torch.stack([item["numeric"] for item in items]),
            "labels": torch.stack([item["labels"] for item in items]),
        }

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=self.collate)

"""The order-error lab's label-aware fitted feature and its control runs (used by ``order_lab.py``).

* **Target encoding** of a categorical column (``shop``): each shop's class shares, smoothed
  towards the class prior, become numeric columns ``te_0 .. te_{C-1}``. Fitted on the train split
  only it is a sound feature; fitted on train + validation, every validation row's own label is
  inside its shop's encoding: the label-aware leakage the problem's "validation metrics inflated
  5-15 %" claim is about (mean/std carry no label and cannot inflate anything).
* **Controls**: Lightning's ``BoringModel`` (one epoch of its ``BoringDataModule``, as
  Lightning's tests run it) and the correct hand-written pipeline of ``tests/handwritten.py``
  (a word-level vocabulary capped at 400 words), both with ``SymptomMonitor`` and
  ``OrderValidator`` riding along; a monitor must stay silent on them.

Pure functions for the data (:func:`shop_of`, :func:`target_encoding`, :func:`encode_rows`), one
function per control run.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xxhash

__all__ = [
    "TE_SMOOTHING",
    "diagnoses",
    "encode_rows",
    "leaky_validation",
    "monitor_facts",
    "monitor_readings",
    "run_boring",
    "run_handwritten",
    "shop_of",
    "target_encoding",
]

#: Pseudo-count of the prior in each shop's encoding (a common small value).
TE_SMOOTHING = 1.0
_ROWS_PER_SHOP = 8
_SPECIALIST_SHARE = 0.5


def shop_of(key: str, label: int, seed: int, num_shops: int, num_classes: int) -> int:
    """The shop a row was sold in: a specialist of its label half of the time, else any shop.

    Derived from the row's near-duplicate key, so near-duplicates share their shop. Shops carry
    real label information (half the rows go to a shop of their class), so a model learns to use
    the encoding, which is what lets a leaky encoding inflate validation metrics.
    """
    h = xxhash.xxh3_64_intdigest(key.encode(), seed=seed + 15485863)
    if (h & 0xFFFF) / 0x10000 < _SPECIALIST_SHARE:
        per_class = max(num_shops // num_classes, 1)
        return (((h >> 16) % per_class) * num_classes + label) % num_shops
    return (h >> 16) % num_shops


def num_shops(rows: int) -> int:
    """About ``_ROWS_PER_SHOP`` rows per shop."""
    return max(rows // _ROWS_PER_SHOP, 4)


def target_encoding(
    shops: Sequence[int], labels: Sequence[int], num_classes: int, smoothing: float = TE_SMOOTHING
) -> tuple[dict[int, list[float]], list[float]]:
    """Each shop's smoothed class shares, and the prior (for shops never seen), fitted on the given rows."""
    prior = [0.0] * num_classes
    counts: dict[int, list[float]] = {}
    for shop, label in zip(shops, labels):
        prior[label] += 1
        counts.setdefault(shop, [0.0] * num_classes)[label] += 1
    total = max(sum(prior), 1.0)
    prior = [p / total for p in prior]
    table = {
        shop: [(c[k] + smoothing * prior[k]) / (sum(c) + smoothing) for k in range(num_classes)]
        for shop, c in counts.items()
    }
    return table, prior


def encode_rows(
    rows: list[dict[str, Any]], table: dict[int, list[float]], prior: list[float]
) -> list[dict[str, Any]]:
    """The rows with columns ``te_<k>`` from the fitted encoding."""
    return [{**row, **{f"te_{k}": v for k, v in enumerate(table.get(row["shop"], prior))}} for row in rows]


def te_columns(num_classes: int) -> list[str]:
    """The encoding's column names."""
    return [f"te_{k}" for k in range(num_classes)]


# -- controls ------------------------------------------------------------------------------------------
def _quiet_trainer(pl: Any, callbacks: list[Any], **kwargs: Any) -> Any:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **kwargs,
    )


def monitor_facts(monitor: Any) -> dict[str, Any] | None:
    """The evidence the monitor's attribution had (plain data): what the ledger and the checks proved."""
    facts = monitor.facts
    if facts is None:
        return None
    keys = ("validator", "fitted_on_train", "split_by_key", "overlap_check", "label_checked")
    return {"rules": sorted(facts.rules), **{k: getattr(facts, k) for k in keys}}


def monitor_readings(monitor: Any) -> dict[str, list[Any]]:
    """What the monitor compared at each validation: the train loss at its step, that estimate's
    spread (log units; ``None`` where too few steps), and the validation loss."""
    readings = monitor.readings
    return {
        "train": [round(v, 5) for v in readings.epoch_train],
        "spread": [round(v, 5) if v < float("inf") else None for v in readings.train_spread],
        "val": [round(v, 5) for v in readings.epoch_val],
    }


def diagnoses(monitor: Any) -> list[dict[str, Any]]:
    """The monitor's diagnoses as plain data (with the detector's ``kind`` or ``trigger``)."""
    return [
        {
            "symptom": d.symptom,
            "step": int(d.step),
            "suspected_rule": d.suspected_rule,
            "kind": d.evidence.get("kind") or d.evidence.get("trigger"),
            "ruled_out": sorted(d.evidence.get("ruled_out") or {}),
            "message": d.message,
        }
        for d in monitor.diagnoses
    ]


def leaky_validation(dm: Any, rows: int = 200, repeats: int = 0) -> Any:
    """A datamodule whose validation rows are ``rows`` train rows of ``dm`` (prepared and set up),
    trained on ``1 + repeats`` times per epoch; in memory, no ledger (what a hand-written pipeline
    with duplicates on both sides of its split looks like to the monitor)."""
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    dm.setup("fit")
    train = dm.train_dataloader()
    items = [train.dataset[i] for i in range(len(train.dataset))]
    collate, batch_size = train.collate_fn, train.batch_size

    class LeakyValidation(pl.LightningDataModule):
        def train_dataloader(self) -> DataLoader:
            return DataLoader(items + items[:rows] * repeats, batch_size, shuffle=True, collate_fn=collate)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(items[:rows], 64, collate_fn=collate)

    return LeakyValidation()


def run_boring(seed: int) -> dict[str, Any]:
    """Lightning's BoringModel, one epoch of its BoringDataModule, with the monitor and validator."""
    import pytorch_lightning as pl
    from pytorch_lightning.demos.boring_classes import BoringDataModule, BoringModel

    from lightning_order import OrderValidator, SymptomMonitor

    pl.seed_everything(seed, verbose=False)
    monitor = SymptomMonitor(val_metric="valid_loss", verbose=False)
    trainer = _quiet_trainer(pl, [OrderValidator(on_violation="warn"), monitor], max_epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(BoringModel(), BoringDataModule())
    return {"global_step": int(trainer.global_step), "monitor_diagnoses": diagnoses(monitor)}


def run_handwritten(seed: int, repo: Path) -> dict[str, Any]:
    """The correct hand-written pipeline of tests/handwritten.py (capped word-level vocabulary), 3 epochs."""
    import pytorch_lightning as pl

    from lightning_order import OrderValidator, SymptomMonitor

    sys.path.insert(0, str(repo / "tests"))
    from handwritten import DocsClassifier, DocsData

    pl.seed_everything(seed, verbose=False)
    dm = DocsData()
    dm.setup("fit")
    monitor = SymptomMonitor(unk_token_id=dm.vocab["[UNK]"], check_every_n_steps=5, verbose=False)
    trainer = _quiet_trainer(
        pl, [OrderValidator(on_violation="warn"), monitor], max_epochs=3, num_sanity_val_steps=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(DocsClassifier(vocab_size=dm.vocab_size), dm)
    return {
        "global_step": int(trainer.global_step),
        "unk_rate": monitor.readings.unk_rate,
        "monitor_diagnoses": diagnoses(monitor),
    }

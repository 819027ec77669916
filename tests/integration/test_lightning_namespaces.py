"""Both Lightning namespaces in real ``Trainer.fit`` runs: a datamodule without validation and our
callbacks, and OrderedDataModule with the model, under ``pytorch_lightning`` and ``lightning.pytorch``.

The base classes and hook dispatch of ``lightning_order.compat``: tests/unit/core/test_compat.py.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest
import torch
from helpers import quiet_trainer
from torch.utils.data import DataLoader

from lightning_order import (
    OrderedDataModule,
    OrderedTextClassifier,
    OrderValidator,
    OrderWarning,
    SymptomMonitor,
)
from lightning_order import compat as _compat

NAMESPACES = ("pytorch_lightning", "lightning.pytorch")


@pytest.fixture(params=NAMESPACES)
def ns(request: pytest.FixtureRequest) -> Any:
    return importlib.import_module(request.param)


def _trainer(ns: Any, callbacks: list, **kwargs: Any) -> Any:
    short = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1}
    return quiet_trainer(None, callbacks, ns=ns, **{**short, **kwargs})


class _NoValidation(_compat.LightningDataModule):
    """A datamodule without val_dataloader: the Trainer must not call the base's (which raises)."""

    def train_dataloader(self) -> DataLoader:
        rows = [
            {
                "input_ids": torch.randint(1, 20, (6,)),
                "features": torch.zeros(0),
                "labels": torch.tensor(i % 2),
            }
            for i in range(32)
        ]
        return DataLoader(rows, batch_size=8)


def test_a_datamodule_without_validation_and_the_callbacks_under_both(ns):
    model = OrderedTextClassifier(vocab_size=20, num_features=0, num_classes=2)
    validator = OrderValidator()
    trainer = _trainer(ns, [validator, SymptomMonitor()])
    trainer.fit(model, _NoValidation())
    assert trainer.global_step == 2 and validator.violations == []


def test_ordered_datamodule_and_model_under_both(ns, tmp_path):
    dm = OrderedDataModule(
        demo_size=400, vocab_size=200, max_length=16, batch_size=32, cache_dir=str(tmp_path)
    )
    model = OrderedTextClassifier(**dm.dims, embed_dim=8, hidden_dim=8)
    validator = OrderValidator()
    trainer = _trainer(ns, [validator, SymptomMonitor()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
        trainer.validate(model, dm, verbose=False)
    assert trainer.global_step == 2 and validator.violations == []
    assert not [w for w in caught if issubclass(w.category, OrderWarning)]
    steps = dm.ledger.steps()
    assert steps[steps.index("init_model") :] == [
        "init_model",
        "configure_optimizers",
        "train",
        "evaluate",
        "evaluate",
    ]

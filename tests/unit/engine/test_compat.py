"""Both Lightning namespaces: every public class works under ``pytorch_lightning`` and ``lightning.pytorch``.

``lightning_order.compat`` builds base classes that subclass both namespaces' classes; where the
two namespaces' hook implementations differ (docstrings only), the hook follows the namespace of
the Trainer the object is attached to, so Lightning's ``is_overridden`` answers right under both.
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import quiet_trainer, readme_training_example
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
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=NAMESPACES)
def ns(request: pytest.FixtureRequest) -> Any:
    return importlib.import_module(request.param)


def _trainer(ns: Any, callbacks: list, **kwargs: Any) -> Any:
    short = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1}
    return quiet_trainer(None, callbacks, ns=ns, **{**short, **kwargs})


@pytest.mark.parametrize("name", ["LightningModule", "LightningDataModule", "Callback"])
def test_bases_are_subclasses_of_both_namespaces(name):
    for namespace in NAMESPACES:
        assert issubclass(getattr(_compat, name), getattr(importlib.import_module(namespace), name))
    for cls in (OrderedTextClassifier, OrderedDataModule, OrderValidator):
        assert any(
            issubclass(cls, getattr(_compat, n))
            for n in ("LightningModule", "LightningDataModule", "Callback")
        )


def test_hooks_follow_the_namespace_of_the_attached_trainer(ns):
    from lightning_utilities.core.overrides import is_overridden

    model = OrderedTextClassifier(vocab_size=20, num_features=0, num_classes=2)
    model.trainer = ns.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    for hook in ("configure_model", "configure_sharded_model", "val_dataloader", "on_train_epoch_end"):
        assert not is_overridden(hook, model, ns.LightningModule), hook
    assert is_overridden("configure_optimizers", model, ns.LightningModule)


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


@pytest.mark.slow
def test_readme_example_runs_under_lightning_pytorch(tmp_path, monkeypatch):
    """The README's training example with ``import lightning.pytorch as pl`` instead."""
    namespace = readme_training_example(tmp_path, monkeypatch, namespace_module="lightning.pytorch")
    trainer = namespace["trainer"]
    assert type(trainer).__module__.startswith("lightning.pytorch")
    assert trainer.global_step > 0 and trainer.state.finished

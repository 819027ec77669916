"""Both Lightning namespaces: every public class works under ``pytorch_lightning`` and ``lightning.pytorch``.

``lightning_order.compat`` builds base classes that subclass both namespaces' classes; where the
two namespaces' hook implementations differ (docstrings only), the hook follows the namespace of
the Trainer the object is attached to, so Lightning's ``is_overridden`` answers right under both.
Real runs under both namespaces: tests/integration/test_lightning_namespaces.py.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from lightning_order import (
    OrderedDataModule,
    OrderedTextClassifier,
    OrderValidator,
)
from lightning_order import compat as _compat

NAMESPACES = ("pytorch_lightning", "lightning.pytorch")


@pytest.fixture(params=NAMESPACES)
def ns(request: pytest.FixtureRequest) -> Any:
    return importlib.import_module(request.param)


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

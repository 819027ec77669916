"""A check of a user's own, registered from outside the package with ``lightning_order``'s public
names only, runs in a real ``Trainer.fit``, stops it with its own rule code, and unregisters cleanly
(the same fit then trains). Unit tests of the registry: tests/unit/checks/test_registry.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_order import (
    RULES,
    CheckEvidence,
    OrderError,
    OrderValidator,
    Rule,
    Violation,
    register_check,
    unregister_check,
)

CONSTANT = Rule(
    "a feature column holds one value on every sampled train row",
    "the model learns nothing from it; often a join or a fill step that went wrong",
    "look at the step that built the column",
)


class Rows(pl.LightningDataModule):
    """Four float features and a label; column 2 constant when ``broken``."""

    def __init__(self, broken: bool) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = (
            torch.randn(64, 4, generator=generator),
            torch.randint(0, 2, (64,), generator=generator),
        )
        if broken:
            self.x[:, 2] = 1.0

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[:48], self.y[:48]), batch_size=8)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[48:], self.y[48:]), batch_size=8)


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(4, 2)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self.features(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


SEEN: list[CheckEvidence] = []


def constant_features(evidence: CheckEvidence) -> Iterator[Violation]:
    """The user's judge: pure, on the sampled train rows it declared."""
    SEEN.append(evidence)
    batch = evidence.samples.get("train")
    if batch is None:
        return
    features = batch[0]
    for column in range(features.shape[1]):
        if bool((features[:, column] == features[0, column]).all()):
            yield Violation(
                "constant-feature", ("engineer_features",), f"feature column {column} is constant"
            )


@pytest.fixture
def registered() -> Iterator[None]:
    register_check(
        "constant-features",
        constant_features,
        phase="setup",
        reads=["samples"],
        rules={"constant-feature": CONSTANT},
    )
    SEEN.clear()
    try:
        yield
    finally:
        unregister_check("constant-features")


def _fit(tmp_path, broken: bool) -> pl.Trainer:
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=2, limit_val_batches=0)
    trainer.fit(Model(), datamodule=Rows(broken))
    return trainer


def test_a_users_check_stops_fit_with_its_own_rule_and_unregisters_cleanly(tmp_path, registered):
    with pytest.raises(OrderError) as caught:
        _fit(tmp_path, broken=True)
    assert caught.value.rules == ["constant-feature"] and "feature column 2 is constant" in str(caught.value)
    # It read what it declared, nothing else: the sampled rows, not the ledger, the model or a checkpoint.
    assert len(SEEN) == 1 and SEEN[0].samples["train"] is not None
    assert (SEEN[0].ledger, SEEN[0].checkpoint, dict(SEEN[0].model)) == (None, None, {})
    assert _fit(tmp_path, broken=False).global_step == 2  # correct data: silent, trains


def test_unregistered_the_check_runs_no_more(tmp_path):
    register_check(
        "constant-features",
        constant_features,
        phase="setup",
        reads=["samples"],
        rules={"constant-feature": CONSTANT},
    )
    unregister_check("constant-features")
    SEEN.clear()
    assert "constant-feature" not in RULES
    assert _fit(tmp_path, broken=True).global_step == 2 and SEEN == []

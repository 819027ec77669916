"""OrderValidator in real ``Trainer.fit`` runs (CPU, one process).

Each order error is produced for real, through ``OrderedDataModule(order=..., enforce=False)``
or a hand-written datamodule; each test asserts the rule code and that no optimizer step ran.
Correct runs (checkpointing, early stopping, resume, ``fast_dev_run``, ``trainer.validate``)
must raise nothing and warn nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lightning_order import STANDARD_PIPELINE, OrderedDataModule, OrderError, OrderValidator, OrderWarning
from lightning_order.checks import check_ledger
from lightning_order.models import OrderedTextClassifier

RIGHT = [step.name for step in STANDARD_PIPELINE if step.kind not in ("model", "loop")]  # the data steps


def _reorder(step: str, before: str) -> list[str]:
    order = [s for s in RIGHT if s != step]
    order.insert(order.index(before), step)
    return order


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    # One cache for the module: each data configuration is prepared once.
    return str(tmp_path_factory.mktemp("cache"))


def make_dm(cache_dir: str, **kwargs: Any) -> OrderedDataModule:
    options = {
        "demo_size": 600,
        "vocab_size": 300,
        "max_length": 16,
        "batch_size": 32,
        "cache_dir": cache_dir,
    }
    return OrderedDataModule(**{**options, **kwargs})


class CountingClassifier(OrderedTextClassifier):
    """The reference model, counting optimizer steps."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(embed_dim=8, hidden_dim=8, **kwargs)
        self.optimizer_steps = 0

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        self.optimizer_steps += 1
        super().optimizer_step(*args, **kwargs)


def trainer(tmp_path: Path | None = None, callbacks: list | None = None, **kwargs: Any) -> pl.Trainer:
    callbacks = callbacks if callbacks is not None else [OrderValidator()]
    options = {
        "max_epochs": 1,
        "limit_train_batches": 3,
        "limit_val_batches": 2,
        "enable_checkpointing": any(isinstance(c, ModelCheckpoint) for c in callbacks),
    }
    return quiet_trainer(tmp_path, callbacks, **{**options, **kwargs})


def fit_expecting(
    rule: str, dm: pl.LightningDataModule, model: pl.LightningModule, **kwargs: Any
) -> OrderError:
    """Fits, asserts ``OrderError`` with ``rule`` and that no optimizer step ran."""
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = trainer(**kwargs)
    with pytest.raises(OrderError) as caught:
        run.fit(model, dm)
    assert rule in caught.value.rules, caught.value.rules
    assert run.global_step == 0
    assert getattr(model, "optimizer_steps", 0) == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return caught.value


@pytest.fixture
def no_order_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [w for w in caught if issubclass(w.category, OrderWarning)]


# -- correct runs: nothing raised, nothing warned -------------------------------------------------
def test_correct_run_with_checkpoint_early_stopping_and_resume(tmp_path, cache_dir, no_order_warning):
    dm = make_dm(cache_dir)
    model = CountingClassifier(**dm.dims)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    callbacks = [OrderValidator(), checkpoint, EarlyStopping(monitor="val_loss", patience=3)]
    trainer(tmp_path, callbacks, num_sanity_val_steps=1).fit(model, dm)
    assert model.optimizer_steps == 3
    assert check_ledger(dm.ledger) == []
    assert dm.ledger.steps()[-4:] == ["init_model", "configure_optimizers", "train", "evaluate"]

    resumed_dm = make_dm(cache_dir)
    resumed = CountingClassifier(**resumed_dm.dims)
    again = trainer(tmp_path, [OrderValidator(), ModelCheckpoint(dirpath=tmp_path / "ckpt2")], max_epochs=2)
    again.fit(resumed, resumed_dm, ckpt_path=checkpoint.last_model_path)
    assert again.global_step == 6 and resumed.optimizer_steps == 3
    assert check_ledger(resumed_dm.ledger) == []


def test_fast_dev_run_and_validate_alone(cache_dir, no_order_warning):
    dm = make_dm(cache_dir)
    model = CountingClassifier(**dm.dims)
    quiet_trainer(callbacks=[OrderValidator()], fast_dev_run=True).fit(model, dm)
    assert model.optimizer_steps == 1
    fresh = make_dm(cache_dir)
    trainer().validate(CountingClassifier(**fresh.dims), fresh, verbose=False)
    assert "evaluate" not in fresh.ledger.steps()  # nothing was trained under this ledger
    assert check_ledger(fresh.ledger) == []


# -- order errors made for real: the rule code, and no optimizer step -----------------------------
@pytest.mark.parametrize(
    ("order", "rule", "size"),
    [
        (_reorder("build_vocab", "clean"), "vocab-before-clean", 600),
        (_reorder("fit_features", "split"), "fit-before-split", 600),
        ([s for s in RIGHT if s != "fit_features"] + ["fit_features"], "shard-before-normalize", 600),
        # Near-duplicates that differ only in dirt straddle the split, identical once cleaned.
        (_reorder("split", "clean"), "train-val-overlap", 2000),
    ],
    ids=["vocab-before-clean", "statistics-on-all-data", "statistics-per-shard", "split-before-clean"],
)
def test_wrong_data_order_stops_before_step_one(cache_dir, order, rule, size):
    dm = make_dm(cache_dir, order=order, enforce=False, demo_size=size)
    error = fit_expecting(rule, dm, CountingClassifier(**dm.dims))
    assert "Details:" in str(error) and rule in str(error)


def test_model_built_with_the_wrong_vocab_size(cache_dir):
    dm = make_dm(cache_dir)
    error = fit_expecting("init-before-data", dm, CountingClassifier(**{**dm.dims, "vocab_size": 1000}))
    assert f"the data's vocab_size is {dm.dims['vocab_size']}" in str(error)


def test_resume_with_a_changed_vocab_names_it_before_the_weights_load(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer(tmp_path, [OrderValidator(), checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    changed = make_dm(cache_dir, vocab_size=200)
    assert changed.dims["vocab_size"] != dm.dims["vocab_size"]
    model = CountingClassifier(**changed.dims)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = trainer(tmp_path)
    with pytest.raises(OrderError) as caught:
        run.fit(model, changed, ckpt_path=checkpoint.last_model_path)
    assert caught.value.rules == ["resume-data-changed"]
    assert "token ids would silently mean other words" in str(caught.value)
    assert run.global_step == 0 and model.optimizer_steps == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_resume_check_from_trainer_ckpt_path_in_setup(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer(tmp_path, [OrderValidator(), checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    changed = make_dm(cache_dir, vocab_size=200)
    run = trainer(tmp_path)
    run.ckpt_path = checkpoint.last_model_path
    with pytest.raises(OrderError, match="resume-data-changed"):
        run.fit(CountingClassifier(**changed.dims), changed)
    assert run.global_step == 0


def test_warn_mode_warns_once_and_trains(cache_dir):
    dm = make_dm(cache_dir, order=_reorder("build_vocab", "clean"), enforce=False)
    model = CountingClassifier(**dm.dims)
    with pytest.warns(OrderWarning, match="vocab-before-clean"):
        trainer(callbacks=[OrderValidator(on_violation="warn", planned_hours=10, gpu_hour_price=3.0)]).fit(
            model, dm
        )
    assert model.optimizer_steps == 3


def test_report_prices_the_waste(cache_dir):
    dm = make_dm(cache_dir, order=_reorder("build_vocab", "clean"), enforce=False)
    error = fit_expecting(
        "vocab-before-clean",
        dm,
        CountingClassifier(**dm.dims),
        callbacks=[OrderValidator(planned_hours=10, gpu_hour_price=3.0)],
    )
    assert "1 device × 10 h = 10.0 device-hours, about 30.00" in str(error)


# -- callback state ---------------------------------------------------------------------------------
def test_state_round_trips_through_a_real_checkpoint(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    validator = OrderValidator()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer(tmp_path, [validator, checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    saved = torch.load(checkpoint.last_model_path, map_location="cpu", weights_only=True)
    state = saved["callbacks"][validator.state_key]
    assert state == validator.state_dict()
    assert state["fingerprints"] == dm.data_fingerprints() and state["dims"] == dm.dims
    assert saved["lightning_order"]["fingerprints"] == dm.data_fingerprints()
    assert saved["lightning_order"]["ledger"]["records"][-1]["step"] == "evaluate"
    restored = OrderValidator()
    restored.load_state_dict(state)
    assert restored.state_dict() == state


# -- a plain LightningDataModule: no ledger, checks from sampled batches ----------------------------
class _Rows(Dataset):
    def __init__(self, ids: torch.Tensor, features: torch.Tensor, labels: torch.Tensor) -> None:
        self.ids, self.features, self.labels = ids, features, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "features": self.features[i], "labels": self.labels[i]}


class PlainDataModule(pl.LightningDataModule):
    """Random token ids and features, split 240/60; ``leak`` copies one train row into validation."""

    def __init__(self, leak: bool = False) -> None:
        super().__init__()
        self.leak = leak

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        ids, feats = torch.randint(1, 50, (300, 8), generator=g), torch.randn(300, 3, generator=g)
        labels = torch.randint(0, 3, (300,), generator=g)
        if self.leak:
            ids[250], feats[250] = ids[17], feats[17]
        self.train, self.val = (
            _Rows(ids[:240], feats[:240], labels[:240]),
            _Rows(ids[240:], feats[240:], labels[240:]),
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=16)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=16)


class TinyModel(pl.LightningModule):
    def __init__(self, vocab_size: int = 50, num_features: int = 3, num_classes: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embedding = nn.Embedding(vocab_size, 4)
        self.feature_proj = nn.Linear(num_features, 4)
        self.head = nn.Linear(8, num_classes)
        self.optimizer_steps = 0

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        pooled = self.embedding(batch["input_ids"]).mean(1)
        return self.head(torch.cat([pooled, self.feature_proj(batch["features"])], -1))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch), batch["labels"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", nn.functional.cross_entropy(self(batch), batch["labels"]))

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        self.optimizer_steps += 1
        super().optimizer_step(*args, **kwargs)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_plain_datamodule_correct_run(no_order_warning):
    model = TinyModel()
    validator = OrderValidator()
    trainer(callbacks=[validator]).fit(model, PlainDataModule())
    assert model.optimizer_steps == 3
    # What the sampled batches showed, a read-only view (the monitor reads it too).
    assert dict(validator.observed) == {"max_token_id": 49, "num_features": 3, "max_label": 2}
    with pytest.raises(TypeError):
        validator.observed["max_token_id"] = 0  # type: ignore[index]


@pytest.mark.parametrize(
    ("dm", "model", "rule"),
    [
        (PlainDataModule(leak=True), TinyModel(), "train-val-overlap"),
        (PlainDataModule(), TinyModel(vocab_size=30), "init-before-data"),
        (PlainDataModule(), TinyModel(num_features=5), "init-before-data"),
    ],
    ids=["example-in-both-splits", "embedding-too-small", "features-too-wide"],
)
def test_plain_datamodule_errors(dm, model, rule):
    fit_expecting(rule, dm, model)


# -- resume: state restored as saved, a checkpoint without proof, weights that cannot load ---------
def test_resume_restores_exactly_the_saved_state(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    first = OrderValidator()
    trainer(tmp_path, [first, checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    saved = torch.load(checkpoint.last_model_path, map_location="cpu", weights_only=True)
    resumed, restored = OrderValidator(), []

    def load_and_record(state: dict[str, Any]) -> None:  # what Lightning's restore hands over, then holds
        OrderValidator.load_state_dict(resumed, state)
        restored.append(resumed.state_dict())

    resumed.load_state_dict = load_and_record
    trainer(tmp_path, [resumed], max_epochs=2).fit(
        CountingClassifier(**dm.dims), make_dm(cache_dir), ckpt_path=checkpoint.last_model_path
    )
    assert restored == [saved["callbacks"][first.state_key]] and restored[0] == first.state_dict()
    # Same data: what it saves next is the same, at the position the second epoch reached.
    again, before = resumed.state_dict(), first.state_dict()
    assert {k: again[k] for k in ("fingerprints", "dims")} == {k: before[k] for k in ("fingerprints", "dims")}
    assert (before["position"]["epoch"], again["position"]["epoch"]) == (0, 1)


def _checkpoint_without_validator(tmp_path: Path, dm: OrderedDataModule) -> str:
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "plain", save_last=True)
    trainer(tmp_path, [checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    assert "lightning_order" not in torch.load(checkpoint.last_model_path, weights_only=True)
    return checkpoint.last_model_path


def test_resume_without_proof_is_reported_at_the_chosen_level(tmp_path, cache_dir):
    path = _checkpoint_without_validator(tmp_path, make_dm(cache_dir))
    run = trainer(tmp_path, max_epochs=2)
    with pytest.raises(OrderError) as caught:
        run.fit(CountingClassifier(**make_dm(cache_dir).dims), make_dm(cache_dir), ckpt_path=path)
    assert caught.value.rules == ["resume-data-changed"]
    assert "cannot prove the data is unchanged" in str(caught.value) and "on_violation='warn'" in str(
        caught.value
    )
    assert run.global_step == 0
    model = CountingClassifier(**make_dm(cache_dir).dims)
    with pytest.warns(OrderWarning, match="cannot prove the data is unchanged"):
        trainer(tmp_path, [OrderValidator(on_violation="warn")], max_epochs=2).fit(
            model, make_dm(cache_dir), ckpt_path=path
        )
    assert model.optimizer_steps == 3  # the user accepted it: the second epoch trained


def test_shape_mismatch_without_proof_is_resume_data_changed_with_both_shapes(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    path = _checkpoint_without_validator(tmp_path, dm)
    changed = make_dm(cache_dir, vocab_size=200)
    old_rows, new_rows = dm.dims["vocab_size"], changed.dims["vocab_size"]
    assert old_rows != new_rows
    run = trainer(tmp_path, [OrderValidator(on_violation="warn")], max_epochs=2)
    with pytest.warns(OrderWarning, match="cannot prove"), pytest.raises(OrderError) as caught:
        run.fit(CountingClassifier(**changed.dims), changed, ckpt_path=path)
    assert caught.value.rules == ["resume-data-changed"]  # fatal even in warn mode: nothing can load
    text = str(caught.value)
    assert f"embedding.weight: checkpoint [{old_rows}, 8] vs model [{new_rows}, 8]" in text
    assert "Error(s) in loading state_dict" not in text and run.global_step == 0


def test_shape_mismatch_of_a_model_built_before_the_data_is_init_before_data(tmp_path, cache_dir):
    dm = make_dm(cache_dir)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer(tmp_path, [OrderValidator(), checkpoint]).fit(CountingClassifier(**dm.dims), dm)
    run = trainer(tmp_path, max_epochs=2)
    with pytest.raises(OrderError) as caught:
        run.fit(
            CountingClassifier(**{**dm.dims, "vocab_size": 1000}),
            make_dm(cache_dir),
            ckpt_path=checkpoint.last_model_path,
        )
    assert caught.value.rules == ["init-before-data"]
    assert f"embedding.weight: checkpoint [{dm.dims['vocab_size']}, 8] vs model [1000, 8]" in str(
        caught.value
    )

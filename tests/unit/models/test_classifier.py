"""The reference model: shapes, dims in hparams, one real step through a Trainer, argument checks."""

from __future__ import annotations

import pytest
import torch
from helpers import quiet_trainer
from torch.utils.data import DataLoader, Dataset

from lightning_order import OrderedTextClassifier

DIMS = {"vocab_size": 50, "num_features": 3, "num_classes": 4, "max_length": 12}


def _batch(
    size: int = 6, num_features: int = 3, length: int = 12, vocab: int = 50
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(size, length, dtype=torch.long)
    mask[:, length // 2 :] = 0
    ids = torch.randint(1, vocab, (size, length), generator=generator) * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "features": torch.randn(size, num_features, generator=generator),
        "labels": torch.randint(0, 4, (size,), generator=generator),
    }


class _Batches(Dataset):
    """Rows of the batch contract, learnable: the label is the first token's id modulo 4."""

    def __init__(self, rows: int = 64) -> None:
        batch = _batch(rows)
        batch["labels"] = batch["input_ids"][:, 0] % 4
        self.rows = [{key: value[i] for key, value in batch.items()} for i in range(rows)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.rows[index]


def test_forward_shape_and_hparams() -> None:
    model = OrderedTextClassifier(**DIMS)
    assert model(_batch()).shape == (6, 4)
    for key, value in DIMS.items():
        assert model.hparams[key] == value


def test_first_embedding_and_feature_layer_follow_the_dims() -> None:
    model = OrderedTextClassifier(**DIMS, embed_dim=16)
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert embeddings[0].num_embeddings == DIMS["vocab_size"]
    assert embeddings[0].padding_idx == 0
    assert model.feature_proj.in_features == DIMS["num_features"]


def test_padding_does_not_change_the_prediction() -> None:
    model = OrderedTextClassifier(**DIMS).eval()
    batch = _batch()
    padded = dict(batch)
    # Garbage ids behind a zero mask must not matter: the pooling is masked.
    padded["input_ids"] = batch["input_ids"] + (1 - batch["attention_mask"]) * 7
    torch.testing.assert_close(model(batch), model(padded))


@pytest.mark.parametrize("drop", ["attention_mask", "features"])
def test_optional_keys(drop: str) -> None:
    model = OrderedTextClassifier(**DIMS)
    batch = _batch()
    del batch[drop]
    assert model(batch).shape == (6, 4)


def test_no_numeric_features() -> None:
    model = OrderedTextClassifier(vocab_size=50, num_features=0, num_classes=2)
    assert model(_batch(num_features=0)).shape == (6, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vocab_size": 1}, "vocab_size"),
        ({"num_features": -1}, "num_features"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_bad_dims_raise(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OrderedTextClassifier(**{**DIMS, **kwargs})


def test_training_step_learns() -> None:
    torch.manual_seed(0)
    model = OrderedTextClassifier(**DIMS, lr=1e-2)
    batch = _batch(32)
    batch["labels"] = batch["input_ids"][:, 0] % 4
    optimizer = model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.AdamW)
    first = None
    for _ in range(40):
        optimizer.zero_grad()
        loss, _, _ = model._shared_step(batch)
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    assert loss.item() < first / 2


def test_fit_validate_test_log_metrics_and_checkpoint(tmp_path) -> None:
    loader = DataLoader(_Batches(), batch_size=16)
    model = OrderedTextClassifier(**DIMS)
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=2)
    trainer.fit(model, loader, loader)
    for name in ("train_loss", "train_acc", "val_loss", "val_acc", "val_f1"):
        assert name in trainer.callback_metrics, name
    assert 0.0 <= float(trainer.callback_metrics["val_acc"]) <= 1.0
    results = trainer.test(model, loader, verbose=False)
    assert {"test_loss", "test_acc", "test_f1"} <= set(results[0])
    predictions = trainer.predict(model, loader)
    assert predictions[0].shape == (16,)

    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    restored = OrderedTextClassifier.load_from_checkpoint(path)
    assert {k: restored.hparams[k] for k in DIMS} == DIMS

"""The reference model: shapes, dims in hparams, training steps that learn, argument checks.

Through a Trainer (fit, validate, test, a checkpoint): tests/integration/test_models.py.
"""

from __future__ import annotations

import pytest
import torch

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


@pytest.mark.filterwarnings("ignore:You are trying to .self.log")  # no Trainer: Lightning logs nothing
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
        loss = model.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first
    assert loss.item() < first / 2

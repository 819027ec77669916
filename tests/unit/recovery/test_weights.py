"""The weight repairs: transplant (keep what matches), remap_embedding (rows by token), reinit_mismatched."""

from __future__ import annotations

import pytest
import torch

from lightning_order.models import OrderedTextClassifier
from lightning_order.recovery import reinit_mismatched, remap_embedding, transplant

# -- remap_embedding --------------------------------------------------------------------------
OLD_VOCAB = {"[PAD]": 0, "[UNK]": 1, "<b>": 2, "goal": 3, "##vote": 4, "vote": 5, "Chef": 6}
NEW_VOCAB = {"[PAD]": 0, "[UNK]": 1, "vote": 2, "goal": 3, "chef": 4, "oven": 5}


def test_remap_embedding_moves_rows_by_token_bit_for_bit() -> None:
    old = torch.randn(len(OLD_VOCAB), 8)
    init = torch.full((len(NEW_VOCAB), 8), 7.0)
    new = remap_embedding(old, OLD_VOCAB, NEW_VOCAB, init=init)
    assert new.shape == (6, 8)
    for token, new_id in NEW_VOCAB.items():
        if token in OLD_VOCAB:
            assert torch.equal(new[new_id], old[OLD_VOCAB[token]]), token
        else:
            assert torch.equal(new[new_id], init[new_id]), token  # new tokens: the fresh init
    assert not torch.equal(init[2], new[2])  # the input init tensor is not modified in place...
    assert torch.equal(init, torch.full((6, 8), 7.0))


def test_remap_embedding_init_function_and_extra_rows() -> None:
    old = torch.randn(len(OLD_VOCAB), 4, dtype=torch.float64)
    new = remap_embedding(old, OLD_VOCAB, NEW_VOCAB, init=torch.nn.init.zeros_, num_embeddings=10)
    assert new.shape == (10, 4) and new.dtype == torch.float64
    assert torch.equal(new[5], torch.zeros(4)) and torch.equal(new[9], torch.zeros(4))
    assert torch.equal(new[3], old[3])
    with pytest.raises(ValueError, match="expected"):
        remap_embedding(old, OLD_VOCAB, NEW_VOCAB, init=torch.zeros(3, 4))


# -- reinit_mismatched -------------------------------------------------------------------------
DIMS = {"vocab_size": 80, "num_features": 5, "num_classes": 4, "max_length": 32}


def _wrong_model() -> OrderedTextClassifier:
    torch.manual_seed(0)
    return OrderedTextClassifier(vocab_size=50, num_features=3, num_classes=4, max_length=32)


def test_reinit_mismatched_keeps_every_parameter_whose_shape_matches() -> None:
    model = _wrong_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    names = reinit_mismatched(model, DIMS)
    assert names == ["embedding.weight", "feature_proj.weight"]
    after = model.state_dict()
    for name, value in before.items():
        if name in names:
            assert after[name].shape != value.shape
        else:
            assert torch.equal(after[name], value), name  # feature_proj.bias included
    assert model.hparams.vocab_size == 80 and model.hparams.num_features == 5
    batch = {
        "input_ids": torch.randint(1, 80, (2, 6)),
        "attention_mask": torch.ones(2, 6, dtype=torch.long),
        "features": torch.randn(2, 5),
    }
    assert model(batch).shape == (2, 4)


# -- transplant: the one rule behind every repair ----------------------------------------------
def test_transplant_keeps_exactly_the_tensors_whose_name_and_shape_match() -> None:
    old = _wrong_model()
    torch.manual_seed(1)
    new = OrderedTextClassifier(**DIMS)
    fresh_before = {k: v.clone() for k, v in new.state_dict().items()}
    kept, fresh = transplant(old.state_dict(), new, skip=["head.0.bias"])
    assert sorted(fresh) == ["embedding.weight", "feature_proj.weight"]
    assert "head.0.bias" not in kept and "head.0.bias" not in fresh  # skipped: left alone
    state = new.state_dict()
    assert set(kept) | set(fresh) | {"head.0.bias"} == set(state)
    for name in kept:
        assert torch.equal(state[name], old.state_dict()[name]), name
    for name in [*fresh, "head.0.bias"]:
        assert torch.equal(state[name], fresh_before[name]), name

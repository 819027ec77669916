"""``lightning_order.data.text.encode``: the batch function that produces the batch contract."""

from __future__ import annotations

import pickle

import numpy as np

from lightning_order.data.engine.keys import key_hashes
from lightning_order.data.text.encode import Encoder, encoded_features
from lightning_order.data.text.vocab import train_tokenizer


def _encoder(mean=None, std=None):
    tok = train_tokenizer([["the goal the match", "a cloud server"]] * 5, 60)
    return Encoder(tok.to_str(), "text", "text", ["x"], "label", {"a": 0, "b": 1}, 6, mean=mean, std=std)


def test_encoder_pads_standardises_and_hashes_the_key():
    batch = {"text": ["the goal", "a cloud server the match the goal"], "x": [1.0, 3.0], "label": ["b", "a"]}
    out = pickle.loads(pickle.dumps(_encoder(mean=[2.0], std=[2.0])))(batch)  # survives num_proc
    assert out["input_ids"].shape == (2, 6) and out["input_ids"].dtype == np.int32
    assert (out["attention_mask"][0] == [1, 1, 0, 0, 0, 0]).all() and (out["input_ids"][0, 2:] == 0).all()
    assert out["attention_mask"][1].all()  # truncated to max_length
    np.testing.assert_allclose(out["features"][:, 0], [-0.5, 0.5])
    assert out["labels"].tolist() == [1, 0]
    assert (out["key_hash"] == key_hashes(batch["text"], text=True)).all()
    assert _encoder()(batch)["features"][:, 0].tolist() == [1.0, 3.0]  # raw without statistics
    assert set(encoded_features(6, 1)) == set(out)

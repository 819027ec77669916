"""callbacks/lm.py: what marks a run as language modelling with no glue, and where the eos id comes from."""

from __future__ import annotations

import pytest
import torch
from nanogpt import EOS, corpus, split, train_tokenizer

from lightning_order.callbacks.lm import is_lm, lm_evidence


class _Data:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(split(corpus(100))[0], 300)


def _shifted(rows: int = 4, width: int = 9) -> torch.Tensor:
    return torch.arange(rows * width).reshape(rows, width) % 300


@pytest.mark.parametrize(
    ("batch", "lm"),
    [
        ((_shifted()[:, :-1], _shifted()[:, 1:]), True),  # nanoGPT's (x, y)
        ({"input_ids": _shifted(), "labels": _shifted()}, True),  # transformers shifts inside
        ({"input_ids": _shifted(), "labels": _shifted().masked_fill(_shifted() > 30, -100)}, True),
        ({"input_ids": _shifted(), "labels": torch.zeros(4, dtype=torch.long)}, False),  # classification
        ((_shifted(), _shifted().flip(1)), False),
    ],
    ids=["tuple-shifted", "dict-equal", "dict-masked", "classifier", "unrelated"],
)
def test_next_token_batches_mark_an_lm_run_with_no_glue(tokenizer, batch, lm):
    assert is_lm(_Data(tokenizer), batch) is lm
    assert is_lm(_Data(None), batch) is False  # no tokenizer: nothing to check against


def test_the_eos_id_comes_from_the_tokenizers_declared_special_token(tokenizer):
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    assert wrapped.eos_token_id is None
    x = torch.full((2, 8), 5)
    for tok in (tokenizer, wrapped):
        evidence = lm_evidence(_Data(tok), torch.nn.Embedding(300, 4), (x, x))
        assert evidence["eos_id"] == tokenizer.token_to_id(EOS) and evidence["tokenizer_size"] == 300
        assert evidence["rows_with_eos"] == 0 and evidence["block_tokens"] == 9

"""callbacks/validator/lm.py: what marks a run as language modelling with no glue, and where the eos id comes from."""

from __future__ import annotations

import pytest
import torch
from nanogpt import EOS, corpus, split, train_tokenizer

from lightning_order.callbacks.validator.lm import is_lm, lm_evidence


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


class _Windows(_Data):
    """Windows of ``width`` tokens over a stream that holds no end-of-text id."""

    def __init__(self, tokenizer, width: int):
        super().__init__(tokenizer)
        stream = torch.arange(5000) % 250 + 1  # id 0 (<|endoftext|>) never occurs
        self.rows = [(stream[i : i + width], stream[i + 1 : i + width + 1]) for i in range(0, 4900, 7)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=8)


@pytest.mark.parametrize(("width", "rules"), [(32, ["pack-without-eos"]), (8, [])])
def test_no_end_of_text_is_a_violation_or_said_to_be_too_little_evidence(tokenizer, width, rules, caplog):
    from lightning_order.callbacks.validator.lm import lm_violations

    with caplog.at_level("INFO", logger="lightning_order.callbacks.validator.lm"):
        found = lm_violations(_Windows(tokenizer, width), torch.nn.Embedding(300, 4), sample_rows=512)
    assert [v.rule for v in found] == rules
    assert ("not enough evidence" in caplog.text) is (not rules)

"""callbacks/validator/lm.py: what marks a run as language modelling with no glue, and where the eos id comes from."""

from __future__ import annotations

import pytest
import torch
from helpers import lm_violations
from nanogpt import EOS, corpus, split, train_tokenizer

from lightning_order.callbacks.validator.lm import is_lm, label_shift_violations, lm_evidence


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
    from helpers import lm_violations

    with caplog.at_level("INFO", logger="lightning_order.callbacks.validator.lm"):
        found = lm_violations(_Windows(tokenizer, width), torch.nn.Embedding(300, 4), sample_rows=512)
    assert [v.rule for v in found] == rules
    assert ("not enough evidence" in caplog.text) is (not rules)


class _BosFirst(_Data):
    """Llama's ``add_bos_token`` packing: every document opens with ``<s>``, none ends with end-of-text.

    ``bos_id=None``: the same documents with neither boundary (still ``pack-without-eos``)."""

    def __init__(self, tokenizer, bos_id: int | None, width: int = 32):
        super().__init__(tokenizer)
        start = [bos_id] if bos_id is not None else []
        docs = [start + [int(t) for t in torch.arange(40 + i % 30) % 250 + 1] for i in range(120)]
        stream = torch.tensor([t for doc in docs for t in doc])  # id 0 (<|endoftext|>) never occurs
        self.rows = [(stream[i : i + width], stream[i + 1 : i + width + 1]) for i in range(0, 4900, 7)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=8)


@pytest.fixture(scope="module")
def bos_tokenizer():
    tokenizer = train_tokenizer(split(corpus(100))[0], 300)
    tokenizer.add_special_tokens(["<s>"])  # declared, as Llama's tokenizer declares it
    return tokenizer


@pytest.mark.parametrize("wrapped", [False, True], ids=["tokenizers", "transformers"])
@pytest.mark.parametrize(
    ("bos", "rules"), [(True, []), (False, ["pack-without-eos"])], ids=["bos-first", "neither"]
)
def test_a_bos_first_packing_is_a_packing_with_boundaries(bos_tokenizer, wrapped, bos, rules):
    from helpers import lm_violations
    from transformers import PreTrainedTokenizerFast

    bos_id = bos_tokenizer.token_to_id("<s>")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bos_tokenizer) if wrapped else bos_tokenizer
    data = _BosFirst(tokenizer, bos_id if bos else None)
    found = lm_violations(data, torch.nn.Embedding(301, 4), sample_rows=512)
    assert [v.rule for v in found] == rules
    if rules:  # the message names both boundaries it looked for
        assert f"no end-of-text id (0) nor start-of-document id ({bos_id})" in found[0].message


class _Blocks:
    """A hand-written datamodule with no tokenizer (``run_clm.py``'s): blocks served in one label convention."""

    def __init__(self, shifted: bool) -> None:
        blocks = torch.arange(16 * 9).reshape(16, 9) % 64
        inputs = blocks[:, :-1]
        labels = blocks[:, 1:] if shifted else inputs.clone()
        self.rows = [{"input_ids": i, "labels": lab} for i, lab in zip(inputs, labels)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=4)


def _gpt2_wrapped():
    transformers = pytest.importorskip("transformers")
    import pytorch_lightning as pl

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=8)
    wrapper = pl.LightningModule()
    wrapper.model = transformers.GPT2LMHeadModel(config)
    return wrapper


def test_shifted_labels_into_a_transformers_causal_lm_are_caught_with_no_tokenizer():
    [violation] = lm_violations(_Blocks(shifted=True), _gpt2_wrapped(), sample_rows=16)
    assert violation.rule == "labels-shifted-twice"
    assert "GPT2LMHeadModel" in violation.message and "16 of 16 sampled train rows" in violation.message


def test_labels_in_the_models_own_convention_are_silent():
    from lightning_order import OrderedCausalLM

    assert label_shift_violations(_Blocks(shifted=False), _gpt2_wrapped(), 16) == []  # transformers shifts
    reference = OrderedCausalLM(vocab_size=64, padded_vocab_size=64, block_size=8, n_layer=1, n_embd=16)
    assert label_shift_violations(_Blocks(shifted=True), reference, 16) == []  # OrderedCausalLM does not


def test_tuple_batches_are_the_modules_own_targets_and_silent():
    """nanoGPT's ``(x, y)`` feeds the module's own cross-entropy on the HF model's logits: shifted is right."""

    class Tuples(_Blocks):
        def train_dataloader(self):
            rows = [(row["input_ids"], row["labels"]) for row in self.rows]
            return torch.utils.data.DataLoader(rows, batch_size=4)

    assert label_shift_violations(Tuples(shifted=True), _gpt2_wrapped(), 16) == []

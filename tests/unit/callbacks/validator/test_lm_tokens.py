"""callbacks/validator/lm_tokens.py: the tokenizer facts read for the document start / end checks."""

from __future__ import annotations

import numpy as np
import torch
from llama_style import llama_tokenizer
from run_clm import train_bpe

from lightning_order.callbacks.validator.lm import token_evidence, tokenizer_facts

TEXTS = ["ka lo mi ne ru ta vi zo", "pe sa do fu gi ha je ku"] * 20


def test_a_transformers_tokenizer_s_template_pad_and_bos():
    tokenizer = llama_tokenizer(TEXTS)
    facts = tokenizer_facts(tokenizer)
    assert facts.template == "<s> $A </s>" and facts.pad_id == tokenizer.eos_token_id
    assert facts.adds(tokenizer.bos_token_id) is True and facts.max_length is None
    assert tokenizer_facts(llama_tokenizer(TEXTS, "<s> $A")).template == "<s> $A"


def test_truncation_is_read_off_the_transformers_backend_before_the_probe_resets_nothing():
    tokenizer = llama_tokenizer(TEXTS)
    tokenizer(TEXTS, truncation=True, max_length=6)  # the last call leaves the backend truncating
    assert tokenizer_facts(tokenizer).max_length == 6
    assert tokenizer_facts(tokenizer).max_length == 6  # reading (and probing) changed nothing


def test_a_tokenizers_tokenizer_with_truncation_and_padding_on():
    tokenizer = train_bpe(TEXTS, ("<|endoftext|>", "<pad>"))
    assert tokenizer_facts(tokenizer).max_length is None and tokenizer_facts(tokenizer).adds(0) is False
    tokenizer.enable_truncation(24)
    tokenizer.enable_padding(pad_id=1, pad_token="<pad>")
    facts = tokenizer_facts(tokenizer)
    assert (facts.max_length, facts.pad_id, facts.template) == (24, 1, "$A")


def test_an_object_that_is_no_tokenizer_leaves_every_fact_unknown():
    facts = tokenizer_facts(object())
    assert (facts.pad_id, facts.max_length, facts.template, facts.adds(1)) == (None, None, None, None)


def test_truncation_to_model_max_length_is_read_with_that_length():
    tokenizer = llama_tokenizer(TEXTS)
    tokenizer.model_max_length = 16
    tokenizer(TEXTS, truncation=True)  # no max_length: transformers cuts at model_max_length
    assert tokenizer_facts(tokenizer).max_length == 16


def test_rows_padded_in_their_labels_only_are_read_as_padded_rows():
    # litgpt's SFT collate (#48): input_ids padded with 0, which is this BPE's end-of-text id too, and
    # no attention_mask; the padding shows only as trailing -100 labels. Read as packed rows, the
    # pads made "documents" of 1 token piling up: a false documents-truncated on correct SFT.
    tokenizer = train_bpe(TEXTS, ("<|endoftext|>", "<pad>"))
    rng = np.random.default_rng(0)
    ids = np.zeros((32, 40), dtype=np.int64)
    labels = np.full(ids.shape, -100)
    for row, length in enumerate(rng.integers(12, 40, size=32)):
        ids[row, : length - 1] = rng.integers(2, 60, size=length - 1)  # 0 after: the EOS, then pads
        labels[row, :length] = ids[row, :length]
    batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
    found = token_evidence(None, tokenizer, batch, eos_id=0, bos_id=None, sample_rows=8).violations
    assert found == []
    # The same rows with no end-of-text before their padding (a prompt style that adds none): named.
    no_end = {"input_ids": batch["input_ids"], "labels": torch.tensor(np.where(ids == 0, -100, labels))}
    rules = [v.rule for v in token_evidence(None, tokenizer, no_end, eos_id=0, bos_id=None, sample_rows=8).violations]
    assert rules == ["documents-without-eos"]

"""``LMConfig`` checks at construction (issue #32): an end-of-text token that is ordinary text is refused."""

from __future__ import annotations

import pytest

from lightning_order import DataError, OrderedLMDataModule


@pytest.mark.parametrize("eos_token", ["e", "the", "EOS", "end of text", "<|end of text|>", "<>"])
def test_an_eos_token_that_is_ordinary_text_is_refused_at_construction(tmp_path, eos_token):
    """Cleaning removes the end-of-text string from every document: ``"e"`` would delete every letter e."""
    with pytest.raises(DataError) as info:
        OrderedLMDataModule(cache_dir=str(tmp_path), eos_token=eos_token)
    message = str(info.value)
    assert info.value.step == "build_vocab" and "eos_token" in message and repr(eos_token) in message
    assert "control marker" in message and "eos_token='</s>'" in message and "\n" not in message


@pytest.mark.parametrize("eos_token", ["<|endoftext|>", "</s>", "[SEP]", "<eos>", "<｜end▁of▁sentence｜>"])
def test_control_markers_are_accepted_as_eos_token(tmp_path, eos_token):
    assert OrderedLMDataModule(cache_dir=str(tmp_path), eos_token=eos_token).config.eos_token == eos_token


@pytest.mark.parametrize("batch_format", ["HF", "unshifted", None])
def test_an_unknown_batch_format_is_refused_at_construction(tmp_path, batch_format):
    with pytest.raises(DataError) as info:
        OrderedLMDataModule(cache_dir=str(tmp_path), batch_format=batch_format)
    message = str(info.value)
    assert info.value.step == "shard" and "batch_format must be one of auto, shifted, hf" in message
    assert "'hf' for transformers causal LMs" in message and "\n" not in message


def test_the_batch_format_serves_the_data_and_leaves_the_cache_key(tmp_path):
    keys = {
        OrderedLMDataModule(cache_dir=str(tmp_path), batch_format=f).cache_key
        for f in ("auto", "shifted", "hf")
    }
    assert len(keys) == 1


@pytest.mark.parametrize("value", ["true", 1, None])
def test_document_attention_must_be_a_bool(tmp_path, value):
    with pytest.raises(DataError) as info:
        OrderedLMDataModule(cache_dir=str(tmp_path), document_attention=value)
    assert info.value.step == "shard" and "document_attention must be true or false" in str(info.value)


def test_document_attention_serves_the_data_and_leaves_the_cache_key(tmp_path):
    keys = {
        OrderedLMDataModule(cache_dir=str(tmp_path), document_attention=on).cache_key for on in (False, True)
    }
    assert len(keys) == 1

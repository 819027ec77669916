"""lightning_order.fingerprints: fingerprints that see a vocabulary, and refuse what they cannot see (#26)."""

from __future__ import annotations

import pytest
from nanogpt import corpus, split, train_tokenizer

from lightning_order import FingerprintError, LightningOrderError, data_fingerprint
from lightning_order.data.lm.tokenizer import train_byte_bpe
from lightning_order.fingerprints import is_tokenizer, tokenizer_backend, tokenizer_fingerprint


def _hf(tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return split(corpus(200))[0]


def test_a_400_and_a_600_token_bpe_get_different_fingerprints(docs):
    small, large = train_tokenizer(docs, 400), train_tokenizer(docs, 600)
    assert small.get_vocab_size() == 400 and large.get_vocab_size() == 600
    assert data_fingerprint(small) != data_fingerprint(large)
    assert data_fingerprint(small) == data_fingerprint(train_tokenizer(docs, 400))  # deterministic


def test_two_hf_fast_tokenizers_of_one_size_with_different_vocabularies_differ(docs):
    one, other = _hf(train_tokenizer(docs, 500)), _hf(train_tokenizer(split(corpus(200, seed=1))[0], 500))
    assert len(one) == len(other) == 500
    assert data_fingerprint(one) != data_fingerprint(other)
    assert data_fingerprint({"tokenizer": one}) != data_fingerprint({"tokenizer": other})


def test_one_function_for_tokenizers_and_transformers_and_record_step(docs):
    tokenizer = train_tokenizer(docs, 500)
    wrapped = _hf(tokenizer)
    # transformers wraps it in a post-processor that adds no token: the same vocabulary, one fingerprint.
    assert tokenizer_fingerprint(wrapped) == tokenizer_fingerprint(tokenizer) == data_fingerprint(wrapped)
    wrapped.add_special_tokens({"pad_token": "<pad>"})
    assert tokenizer_fingerprint(wrapped) != tokenizer_fingerprint(tokenizer)  # a token added after


class _Opaque:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def __repr__(self) -> str:
        return f"_Opaque(size={len(self.vocab)})"  # a summary: two vocabularies of one size look alike


@pytest.mark.parametrize("value", [_Opaque({"a": 0}), object(), [1, _Opaque({"b": 0})]])
def test_a_repr_only_object_is_refused_with_its_type_and_how_to_pass_a_fingerprint(value):
    with pytest.raises(FingerprintError) as caught:
        data_fingerprint(value)
    text = str(caught.value)
    assert isinstance(caught.value, LightningOrderError) and isinstance(caught.value, TypeError)
    shown = "_Opaque" if "_Opaque" in repr(value) else "object"
    assert shown in text and "step.output" in text and "a string that identifies it" in text


class _Wrapper:
    """A tokenizer as litgpt wraps one (#48): ``processor`` the ``tokenizers.Tokenizer``, ``eos_id`` / ``bos_id``."""

    def __init__(self, processor: object) -> None:
        self.processor, self.eos_id, self.bos_id = processor, 0, None

    def encode(self, text: str) -> list[int]:
        return self.processor.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.processor.decode(ids)


def test_a_wrapper_exposing_encode_decode_and_eos_id_is_a_tokenizer_read_through_its_processor():
    bpe = train_byte_bpe(["the cat sat on the mat"] * 20, 300)
    wrapped = _Wrapper(bpe)
    assert is_tokenizer(wrapped) and tokenizer_backend(wrapped) is bpe
    assert tokenizer_fingerprint(wrapped) == tokenizer_fingerprint(bpe)
    unreadable = _Wrapper(object())  # nothing to fingerprint: not read as a tokenizer
    assert not is_tokenizer(unreadable)

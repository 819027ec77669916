"""``lightning_order.data.text.vocab``: the vocabulary size check and the deterministic tokenizer."""

from __future__ import annotations

import pytest

from lightning_order.data.text.demo import demo_rows
from lightning_order.data.text.normalise import clean_text
from lightning_order.data.text.vocab import SPECIAL_TOKENS, check_vocab_size, train_tokenizer
from lightning_order.errors import DataError


@pytest.mark.parametrize("bad", [0, 3, len(SPECIAL_TOKENS), "100"])
def test_vocab_size_must_exceed_special_tokens(bad):
    with pytest.raises(DataError) as info:
        check_vocab_size(bad)
    assert info.value.step == "build_vocab"


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_train_tokenizer(kind):
    texts = [clean_text(r["text"]) for r in demo_rows(300)]
    batches = (texts[i : i + 64] for i in range(0, len(texts), 64))
    tok = train_tokenizer(batches, 200, kind)
    assert tok.token_to_id("[PAD]") == 0
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert 50 < tok.get_vocab_size() <= 200
    assert tok.encode("[CLS] the goal").tokens[0] == "[CLS]"

"""A supplied ``tokenizer.json`` (issue #32): its end-of-text token must be one of its special tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.tokenizer import character_loss, read_tokenizer, train_byte_bpe

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200}


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return stdlib_corpus(200)


def _plain(docs: list[str], path: Path, extra: str | None = None, special: bool = True) -> str:
    tokenizer = train_byte_bpe(docs, 300)
    if extra is not None:
        tokenizer.add_tokens([AddedToken(extra, special=special)])
    tokenizer.save(str(path))
    return str(path)


@pytest.mark.parametrize(
    ("extra", "special", "kind"),
    [
        (None, True, "an ordinary token of its vocabulary"),
        ("</s>", False, "an added token that is not special"),
    ],
    ids=["vocabulary-piece", "added-not-special"],
)
def test_an_eos_token_that_is_not_a_special_token_of_the_supplied_tokenizer_is_refused(
    tmp_path, docs, extra, special, kind
):
    path = _plain(docs, tmp_path / "t.json", extra, special)
    eos = extra or "<s>"
    if extra is None:  # "<s>" an ordinary word of the vocabulary: text "<s>" encodes to it
        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "<s>": 1, "a": 2}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.save(path)
    with pytest.raises(DataError) as info:
        read_tokenizer(path, eos)
    message = str(info.value)
    assert info.value.step == "build_vocab" and f"eos_token {eos!r} is {kind}" in message
    assert path in message and "add_special_tokens" in message and "\n" not in message


def test_a_datamodule_refuses_an_eos_token_the_supplied_tokenizer_holds_as_plain_text(tmp_path, docs):
    path = _plain(docs, tmp_path / "t.json", "</s>", special=False)
    dm = OrderedLMDataModule(cache_dir=str(tmp_path / "c"), tokenizer_file=path, eos_token="</s>", **SMALL)
    with pytest.raises(DataError, match="eos_token '</s>' is an added token that is not special") as info:
        dm.prepare_data()
    assert info.value.step == "build_vocab" and not dm.cache_path.exists()


def test_character_loss_counts_special_tokens_in_the_text_as_text(docs):
    tokenizer = train_byte_bpe(docs, 300)
    tokenizer.add_special_tokens(["<s>"])
    assert character_loss(tokenizer, ["a <s> b", "<s><s>"]) == (0, 11)
    assert tokenizer.encode_special_tokens is False


# -- issue #42, item 5: a WordLevel or WordPiece model without its unknown token ----------------
@pytest.mark.parametrize(
    ("kind", "unknown", "expected"),
    [
        ("WordLevel", "[UNK]", "a WordLevel model whose unknown token '[UNK]' is not in its vocabulary"),
        ("WordLevel", "", "a WordLevel model with no unknown token"),
        ("WordPiece", "[UNK]", "a WordPiece model whose unknown token '[UNK]' is not in its vocabulary"),
    ],
    ids=["wordlevel", "wordlevel-empty-unk", "wordpiece"],
)
def test_a_word_model_without_its_unknown_token_is_a_data_error_naming_the_fix(
    tmp_path, docs, kind, unknown, expected
):
    words = sorted({w for doc in docs[:20] for w in doc.split()})[:200]
    vocab = {word: i for i, word in enumerate(words)}
    model = getattr(models, kind)(vocab, unk_token=unknown)
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["</s>"])
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "cache"), tokenizer_file=str(path), eos_token="</s>", **SMALL
    )
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert info.value.step == "build_vocab" and "\n" not in message
    assert expected in message and "tokenizer_file=None" in message
    assert f"{kind}Trainer(special_tokens=['[UNK]', ...])" in message

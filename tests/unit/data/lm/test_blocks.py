"""Text in, ids out, nothing smuggled (issue #32): the ids ``encode`` writes come from the document's text
as ordinary text, and what a tokenizer cannot encode is counted per split and refused past the threshold.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.lm.blocks import encode_documents
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.tokenizer import MAX_CHARACTER_LOSS, train_byte_bpe

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1}
#: Control tokens a chat or Llama-style tokenizer declares, written literally in documents.
CONTROL = ["<s>", "<pad>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return stdlib_corpus(200)


def _jsonl(path: Path, texts: list[str]) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def _smuggling(docs: list[str]) -> list[str]:
    """Every document with the control tokens written in its text, as chat logs and scraped markup hold them."""
    return [f"<s> {d} <|im_start|>user\n<pad><pad> hi <|im_end|>" for d in docs]


def _chat_tokenizer(docs: list[str], path: Path) -> tuple[str, list[int]]:
    tokenizer = train_byte_bpe(docs, 300)
    tokenizer.add_special_tokens(CONTROL)
    tokenizer.save(str(path))
    return str(path), [tokenizer.token_to_id(t) for t in CONTROL]


# -- special tokens in the text never become control ids -------------------------------------------
def test_encode_documents_splits_special_tokens_written_in_the_text(docs):
    tokenizer = train_byte_bpe(docs, 300)
    tokenizer.add_special_tokens(CONTROL)
    control = {tokenizer.token_to_id(t) for t in CONTROL}
    text = _smuggling(docs[:3])
    stream = encode_documents(tokenizer, text, 0)
    assert not control & set(stream.ids.tolist())
    assert stream.ids.tolist().count(0) == 3  # the end-of-text ids the pipeline put, none from the text
    assert tokenizer.decode(stream.ids[: stream.ends[0]].tolist(), skip_special_tokens=False) == text[0]
    assert tokenizer.encode_special_tokens is False  # the caller's tokenizer is left as it was


def test_special_tokens_in_documents_never_reach_the_blocks_with_a_supplied_tokenizer(tmp_path, docs):
    path, control = _chat_tokenizer(docs, tmp_path / "chat.json")
    data = _jsonl(tmp_path / "d.jsonl", _smuggling(docs))
    dm = OrderedLMDataModule(
        "json", data_files=data, tokenizer_file=path, cache_dir=str(tmp_path / "c"), **SMALL
    )
    dm.setup("fit")
    for split in ("train", "val"):
        assert not set(control) & set(np.unique(dm.blocks(split)).tolist()), split
    encode = dm.ledger.latest("encode")
    assert encode.stats["eos_tokens"] == encode.stats["documents"]  # one per document, none from the text
    assert encode.params["special_tokens_in_text"] == "split"
    assert dm.tokenizer.encode("<s>").ids == [dm.tokenizer.token_to_id("<s>")]  # users' tokenizer unchanged


def test_an_end_of_text_marker_kept_by_a_clean_override_stays_text_with_the_pipelines_own_bpe(tmp_path, docs):
    class KeepMarkers(OrderedLMDataModule):
        def clean(self, text: str) -> str:
            return text  # keeps "<|endoftext|>" in the text: it must not become the end-of-text id

    data = _jsonl(tmp_path / "d.jsonl", [f"{d} <|endoftext|> <s>" for d in docs])
    dm = KeepMarkers("json", data_files=data, cache_dir=str(tmp_path / "c"), **SMALL)
    dm.setup("fit")
    encode = dm.ledger.latest("encode")
    assert encode.stats["eos_tokens"] == encode.stats["documents"]
    assert int((dm.blocks("train") == dm.eos_token_id).sum()) <= len(dm.documents("train"))
    assert any("<|endoftext|>" in d for d in dm.documents("train"))


# -- what a tokenizer cannot encode is counted per split ------------------------------------------
def _char_bpe(text: str, path: Path) -> str:
    """A BPE knowing only the characters of ``text``, no unknown token, no byte fallback: others vanish."""
    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate(sorted(set(text) - set(" \n\t")))}}
    tokenizer = Tokenizer(models.BPE(vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(path))
    return str(path)


def test_encode_documents_counts_the_characters_a_tokenizer_loses(tmp_path):
    tokenizer = Tokenizer.from_file(_char_bpe("alpha beta", tmp_path / "c.json"))
    stream = encode_documents(tokenizer, ["alpha beta", "xyz qq", "alpha  zeta"], 0, measure_loss=True)
    assert (stream.lost_characters, stream.characters) == (6, 23)
    assert stream.empty_documents == 1  # "xyz qq" encodes to nothing: only its end-of-text id is left


def test_validation_documents_a_supplied_tokenizer_cannot_encode_are_refused_naming_the_split(tmp_path, docs):
    """The train sample encodes fine (build_vocab's probe passes); only validation documents vanish."""
    greek = "αβγδεζηθικλμνξοπρστυφχψω"
    foreign = [f"{greek[i % 24]}{greek[i // 24]}ω ψψψ χχχ φφφ υυυ τττ σσσ" for i in range(300)]  # all unknown
    where = OrderedLMDataModule(
        "json",
        data_files=_jsonl(tmp_path / "all.jsonl", docs + foreign),
        cache_dir=str(tmp_path / "a"),
        **SMALL,
    )
    in_val = [d for d in where.documents("val") if d[0] in greek]  # the split is by hash of the text
    assert in_val
    known = [d for split in ("train", "val") for d in where.documents(split) if d[0] not in greek]
    path = _char_bpe("".join(known), tmp_path / "c.json")
    dm = OrderedLMDataModule(
        "json",
        data_files=_jsonl(tmp_path / "d.jsonl", docs + in_val),
        tokenizer_file=path,
        cache_dir=str(tmp_path / "c"),
        **SMALL,
    )
    with pytest.raises(DataError, match="cannot encode") as info:
        dm.prepare_data()
    message = str(info.value)
    assert (
        info.value.step == "encode" and "the val split" in message and f"{MAX_CHARACTER_LOSS:.1%}" in message
    )
    assert f"{len(in_val)} documents" in message and "byte_fallback" in message and "\n" not in message
    assert not dm.cache_path.exists()


def test_encode_loss_is_recorded_per_split_for_a_supplied_tokenizer(tmp_path, docs):
    path, _ = _chat_tokenizer(docs, tmp_path / "chat.json")
    data = _jsonl(tmp_path / "d.jsonl", docs)
    dm = OrderedLMDataModule(
        "json", data_files=data, tokenizer_file=path, cache_dir=str(tmp_path / "c"), **SMALL
    )
    stats = dm.ledger.latest("encode").stats
    for split in ("train", "val"):
        assert stats[f"{split}_lost_characters"] == 0 and stats[f"{split}_characters"] > 0
        assert stats[f"{split}_character_loss"] == 0.0 and stats[f"{split}_empty_documents"] == 0

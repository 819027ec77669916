"""BOS handled on purpose (issue #34, item 3): one decision for a document's start, in the blocks and the tokenizer.

For every way of getting a tokenizer (trained, trained with ``bos_token="<s>"``, a Llama-style
folder whose post-processor is ``<s> $A </s>``, the same with ``bos_token=None``), the tokenizer
handed to users encodes a prompt exactly as the blocks hold a document start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_tokenizers import document_starts, llama_style_tokenizer, prompt_of
from tokenizers import processors

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.lm.blocks import encode_documents
from lightning_order.data.lm.bos import added_by_post_processor, choose_bos
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.tokenizer import train_byte_bpe
from lightning_order.data.lm.tokenizer_source import read_source

# One partition: the val stream holds the documents in order (pack moves each partition's tail to the end).
SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200, "num_partitions": 1}


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return stdlib_corpus(200)


@pytest.fixture(scope="module")
def llama_json(tmp_path_factory: pytest.TempPathFactory, docs: list[str]) -> str:
    path = tmp_path_factory.mktemp("llama") / "tokenizer.json"
    llama_style_tokenizer(docs).save(str(path))
    return str(path)


def _dm(tmp_path: Path, **kwargs: Any) -> OrderedLMDataModule:
    dm = OrderedLMDataModule(cache_dir=str(tmp_path / "cache"), **{**SMALL, **kwargs})
    dm.prepare_data()
    dm.setup("fit")
    return dm


# -- the decision -------------------------------------------------------------------------
def test_auto_takes_the_token_the_post_processor_puts_first(docs: list[str]) -> None:
    tokenizer = llama_style_tokenizer(docs)
    assert added_by_post_processor(tokenizer) == ([1], [0])
    choice = choose_bos("auto", tokenizer, None, "tokenizer 't.json'")
    assert (choice.token, choice.id, choice.origin) == ("<s>", 1, "post_processor")


def test_auto_is_no_bos_for_a_trained_bpe(docs: list[str]) -> None:
    choice = choose_bos("auto", train_byte_bpe(docs[:20], 300), None, "the trained tokenizer")
    assert (choice.token, choice.id, choice.origin) == (None, None, "none")


def test_a_folder_config_that_states_add_bos_token_decides(tmp_path: Path, docs: list[str]) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    llama_style_tokenizer(docs).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<s>", "add_bos_token": false}')
    source = read_source(str(folder))
    choice = choose_bos("auto", llama_style_tokenizer(docs), source, source.label)
    assert (choice.token, choice.origin) == (None, "tokenizer_config")


def test_a_bos_token_that_is_not_a_special_token_is_refused(docs: list[str]) -> None:
    with pytest.raises(DataError) as info:
        choose_bos("<bos>", llama_style_tokenizer(docs), None, "tokenizer 't.json'")
    message = str(info.value)
    assert info.value.step == "build_vocab"
    assert "bos_token '<bos>' is not a special token of tokenizer 't.json'" in message
    assert "'<s>'" in message and "bos_token=None" in message


def test_a_post_processor_that_puts_two_tokens_first_is_refused(docs: list[str]) -> None:
    tokenizer = llama_style_tokenizer(docs)
    ids = [("<s>", 1), ("</s>", 0)]
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> </s> $A", special_tokens=ids)
    with pytest.raises(DataError, match="puts 2 tokens before every text") as info:
        choose_bos("auto", tokenizer, None, "tokenizer 't.json'")
    assert "bos_token=" in str(info.value)


@pytest.mark.parametrize(
    ("bos", "expected"),
    [("hello", "bos_token must be 'auto', None or a control marker"), ("</s>", "both '</s>'")],
)
def test_a_bad_bos_token_is_refused_at_construction(tmp_path: Path, bos: str, expected: str) -> None:
    with pytest.raises(DataError, match=expected) as info:
        OrderedLMDataModule(cache_dir=str(tmp_path), eos_token="</s>", bos_token=bos, **SMALL)
    assert info.value.step == "build_vocab"


# -- encode puts it before every document -------------------------------------------------
def test_encode_puts_the_bos_before_every_document_and_one_eos_after(docs: list[str]) -> None:
    tokenizer = llama_style_tokenizer(docs)
    texts = ["Hello world", "", "Another document here"]
    stream = encode_documents(tokenizer, texts, eos_id=0, bos_id=1)
    words = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    assert stream.ids.tolist() == [t for w in words for t in (1, *w, 0)]
    assert stream.ends.tolist() == np.flatnonzero(stream.ids == 0).tolist()


# -- the blocks and the tokenizer users get agree -----------------------------------------
CASES = {
    "trained": {},
    "trained-with-bos": {"bos_token": "<s>"},
    "llama-folder-auto": {"eos_token": "</s>"},
    "llama-no-bos": {"eos_token": "</s>", "bos_token": None},
}
EXPECTED_BOS = {"trained": None, "trained-with-bos": "<s>", "llama-folder-auto": "<s>", "llama-no-bos": None}


@pytest.mark.parametrize("case", list(CASES))
def test_the_tokenizer_users_get_encodes_a_prompt_as_the_blocks_start_a_document(
    tmp_path: Path, llama_json: str, case: str
) -> None:
    kwargs = dict(CASES[case])
    if case.startswith("llama"):
        kwargs["tokenizer"] = llama_json
    dm = _dm(tmp_path, **kwargs)
    assert dm.bos_token == EXPECTED_BOS[case]
    stream = dm.blocks("val").reshape(-1)
    documents = dm.documents("val")
    starts = document_starts(stream, dm.eos_token_id, 5)
    for index, start in enumerate(starts):
        ids = dm.tokenizer.encode(prompt_of(documents[index])).ids
        assert stream[start : start + len(ids)].tolist() == ids, (case, index)
    bos_id = dm.ledger.info["bos_id"]
    if dm.bos_token is None:
        assert bos_id is None and dm.tokenizer.token_to_id("<s>") not in stream.tolist()
    else:  # every document starts with it, and nothing else holds it
        assert bos_id == dm.tokenizer.token_to_id(dm.bos_token)
        assert (
            np.flatnonzero(stream == bos_id).tolist()
            == document_starts(stream, dm.eos_token_id, len(stream))[: int((stream == bos_id).sum())]
        )


def test_bos_is_recorded_and_enters_the_cache_key(tmp_path: Path, llama_json: str) -> None:
    dm = _dm(tmp_path, tokenizer=llama_json, eos_token="</s>")
    vocab, encode = dm.ledger.latest("build_vocab"), dm.ledger.latest("encode")
    assert (vocab.params["bos_token"], vocab.params["bos_source"]) == ("<s>", "post_processor")
    assert vocab.stats["bos_id"] == 1 and vocab.stats["special_tokens"] == ["</s>", "<s>"]
    assert encode.params["bos_token"] == "<s>"
    assert encode.stats["bos_tokens"] == encode.stats["documents"] == encode.stats["eos_tokens"]
    assert (dm.ledger.info["bos_token"], dm.ledger.info["bos_id"]) == ("<s>", 1)
    keys = {
        OrderedLMDataModule(
            cache_dir=str(tmp_path), tokenizer=llama_json, eos_token="</s>", bos_token=bos, **SMALL
        ).cache_key
        for bos in ("auto", None, "<s>")
    }
    assert len(keys) == 3
    trained = {
        OrderedLMDataModule(cache_dir=str(tmp_path), bos_token=bos, **SMALL).cache_key
        for bos in ("auto", "<s>")
    }
    assert len(trained) == 2


def test_a_trained_bpe_declares_the_bos_token(tmp_path: Path) -> None:
    dm = _dm(tmp_path, bos_token="<s>")
    special = {t.content for t in dm.tokenizer.get_added_tokens_decoder().values() if t.special}
    assert special == {"<|endoftext|>", "<s>"} and dm.tokenizer.token_to_id("<s>") == 1
    assert (
        dm.tokenizer.encode("Hello").ids[0] == 1 and dm.tokenizer.encode("Hello").ids[-1] != dm.eos_token_id
    )

"""BOS handled on purpose (issue #34, item 3): one decision for a document's start, in the blocks and the tokenizer.

For every way of getting a tokenizer (trained, trained with ``bos_token="<s>"``, a Llama-style
folder whose post-processor is ``<s> $A </s>``, the same with ``bos_token=None``), the tokenizer
handed to users encodes a prompt exactly as the blocks hold a document start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_tokenizers import document_starts, llama_style_folder, llama_style_tokenizer, prompt_of
from tokenizers import processors

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.lm.blocks import encode_documents
from lightning_order.data.lm.bos import added_by_post_processor, choose_bos
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.hf_tokenizer import save_tokenizer
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


def test_a_folder_config_add_bos_token_does_not_override_its_post_processor(
    tmp_path: Path, docs: list[str]
) -> None:
    # transformers ignores add_bos_token when a tokenizer.json is there: the post-processor decides
    folder = tmp_path / "folder"
    folder.mkdir()
    llama_style_tokenizer(docs).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<s>", "add_bos_token": false}')
    source = read_source(str(folder))
    choice = choose_bos("auto", llama_style_tokenizer(docs), source, source.label)
    assert (choice.token, choice.origin) == ("<s>", "post_processor")


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


# -- issue #42, item 5: the blocks, dm.hf_tokenizer and the saved folder agree on BOS --------
def _config_edits(edit: str) -> dict[str, Any]:
    return {
        "add-bos-false": {"add_bos_token": False},
        "add-bos-true-no-bos-token": {"add_bos_token": True, "bos_token": None},
    }[edit]


@pytest.mark.parametrize(
    ("edit", "bos", "expected"),
    [
        ("add-bos-false", "auto", "<s>"),
        ("add-bos-true-no-bos-token", "auto", "<s>"),
        ("add-bos-false", None, None),
    ],
)
def test_the_blocks_hf_tokenizer_and_saved_folder_start_a_document_as_the_supplied_folder_does(
    tmp_path: Path, docs: list[str], edit: str, bos: str | None, expected: str | None
) -> None:
    transformers = pytest.importorskip("transformers")
    folder = llama_style_folder(tmp_path / "llama", docs)
    config_path = folder / "tokenizer_config.json"
    config = {**json.loads(config_path.read_text()), **_config_edits(edit)}
    config_path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    dm = _dm(tmp_path, tokenizer=str(folder), eos_token="</s>", bos_token=bos)
    assert dm.bos_token == expected
    saved = save_tokenizer(tmp_path / "saved", dm.tokenizer, dm.ledger.info["special_tokens"])
    users = {
        "dm.tokenizer": lambda text: dm.tokenizer.encode(text).ids,
        "dm.hf_tokenizer": lambda text: dm.hf_tokenizer(text).input_ids,
        "saved folder": lambda text: transformers.AutoTokenizer.from_pretrained(str(saved))(text).input_ids,
    }
    if bos == "auto":  # what the folder itself adds (then its own </s>, which a prompt does not have)
        supplied = transformers.AutoTokenizer.from_pretrained(str(folder))
        users["supplied folder"] = lambda text: supplied(text).input_ids[:-1]
    stream = dm.blocks("val").reshape(-1)
    documents = dm.documents("val")
    for index, start in enumerate(document_starts(stream, dm.eos_token_id, 3)):
        for name, encode in users.items():
            ids = encode(prompt_of(documents[index]))
            assert stream[start : start + len(ids)].tolist() == ids, (name, index)
            assert (ids[0] == dm.tokenizer.token_to_id("<s>")) == (expected is not None), name


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ("</s>", "the end-of-text token '</s>'"),
        ("a", "'a', an ordinary (non-special) token"),
    ],
    ids=["bos-equal-to-eos", "ordinary-token"],
)
def test_auto_refuses_a_post_processor_start_that_cannot_be_a_bos(
    docs: list[str], first: str, expected: str
) -> None:
    tokenizer = llama_style_tokenizer(docs)
    token_id = tokenizer.token_to_id(first)
    assert token_id is not None
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{first} $A", special_tokens=[(first, token_id)]
    )
    with pytest.raises(DataError) as info:
        choose_bos("auto", tokenizer, None, "tokenizer 't.json'", eos_token="</s>")
    message = str(info.value)
    assert info.value.step == "build_vocab" and "\n" not in message
    assert expected in message and "tokenizer 't.json'" in message and "bos_token=" in message


@pytest.mark.parametrize(
    ("first", "expected"),
    [("</s>", "the end-of-text token '</s>'"), (100, "an ordinary (non-special) token")],
    ids=["bos-equal-to-eos", "ordinary-token"],
)
def test_an_auto_bos_that_cannot_start_a_document_is_refused_by_the_datamodule(
    tmp_path: Path, docs: list[str], first: str | int, expected: str
) -> None:
    tokenizer = llama_style_tokenizer(docs)
    token = first if isinstance(first, str) else tokenizer.id_to_token(first)  # a piece of text
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{token} $A", special_tokens=[(token, tokenizer.token_to_id(token))]
    )
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(DataError) as info:
        _dm(tmp_path, tokenizer=str(path), eos_token="</s>")
    message = str(info.value)
    assert expected in message and repr(token) in message and info.value.step == "build_vocab"


@pytest.mark.parametrize("bos", ["<s>", None], ids=["bos", "no-bos"])
def test_every_document_start_in_the_blocks_of_several_partitions_is_whole(
    tmp_path: Path, bos: str | None
) -> None:
    # issue #42, item 6: partitions' tails joined; document_attention reads positions from the blocks
    dm = _dm(tmp_path, bos_token=bos, num_partitions=4, document_attention=True)
    for split in ("train", "val"):
        blocks = np.asarray(dm.blocks(split))
        after_eos = blocks[:, 1:][blocks[:, :-1] == dm.eos_token_id]
        if bos is not None:  # a document start after every end-of-text: its BOS
            assert set(after_eos.tolist()) == {dm.tokenizer.token_to_id(bos)}, split
        else:  # the first tokens of documents: each follows an end-of-text in the split's stream
            firsts = {i for d in dm.documents(split) for i in dm.tokenizer.encode(d).ids[:1]}
            assert set(after_eos.tolist()) <= firsts, split
        batch = dm.val_dataloader() if split == "val" else dm.train_dataloader()
        rows = next(iter(batch))
        inputs, positions = rows["input_ids"], rows["position_ids"]
        starts = (positions == 0)[:, 1:]
        if bos is not None:  # position 0 inside a row: only at a BOS
            assert bool((inputs[:, 1:][starts] == dm.tokenizer.token_to_id(bos)).all()), split
    assert dm.ledger.latest("pack").stats["train_fragment_tokens"] > 0  # fragments met, and dropped

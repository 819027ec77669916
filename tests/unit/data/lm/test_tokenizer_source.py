"""``tokenizer=`` (issue #34, item 2): a ``tokenizer.json``, a local Hugging Face folder or a ``PreTrainedTokenizerFast``.

Each is read once and recorded by a hash of its content: the cache key and the ledger change with
the content, never with the path; a name that is not a local path is refused (no hub download).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from lm_tokenizers import llama_style_folder, llama_style_tokenizer

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.tokenizer_source import read_source

transformers = pytest.importorskip("transformers")

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200, "eos_token": "</s>"}


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return stdlib_corpus(200)


@pytest.fixture
def folder(tmp_path: Path, docs: list[str]) -> Path:
    return llama_style_folder(tmp_path / "llama", docs)


def _dm(tmp_path: Path, **kwargs: Any) -> OrderedLMDataModule:
    return OrderedLMDataModule(cache_dir=str(tmp_path / "cache"), **{**SMALL, **kwargs})


def test_a_folder_is_read_with_its_declared_special_tokens(folder: Path) -> None:
    source = read_source(str(folder))
    assert (source.kind, source.name) == ("folder", str(folder))
    assert source.special == {"bos_token": "<s>", "eos_token": "</s>"}
    assert json.loads(source.text)["model"]["type"] == "BPE"


def test_special_tokens_map_is_read_and_tokenizer_config_wins(folder: Path) -> None:
    (folder / "special_tokens_map.json").write_text(json.dumps({"pad_token": "</s>", "bos_token": "<x>"}))
    source = read_source(str(folder))
    assert source.special == {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"}


@pytest.mark.parametrize("form", ["file", "folder", "object"])
def test_every_form_prepares_the_same_data(tmp_path: Path, folder: Path, form: str) -> None:
    given: Any = {
        "file": str(folder / "tokenizer.json"),
        "folder": str(folder),
        "object": transformers.AutoTokenizer.from_pretrained(str(folder)),
    }[form]
    dm = _dm(tmp_path, tokenizer=given)
    dm.prepare_data()
    reference = _dm(tmp_path / "ref", tokenizer_file=str(folder / "tokenizer.json"))
    reference.prepare_data()
    assert dm.ledger.info["data_fingerprints"]["split"] == reference.ledger.info["data_fingerprints"]["split"]
    dm.setup("fit")
    reference.setup("fit")
    assert (dm.blocks("val") == reference.blocks("val")).all()
    record = dm.ledger.latest("build_vocab")
    assert record.params["source"] == "supplied" and record.params["tokenizer_kind"] == form
    assert record.params["xxh3"] == dm.config.tokenizer_source.digest


def test_the_cache_key_follows_the_content_not_the_path(tmp_path: Path, folder: Path) -> None:
    moved = tmp_path / "elsewhere" / "llama"
    shutil.copytree(folder, moved)
    assert _dm(tmp_path, tokenizer=str(moved)).cache_key == _dm(tmp_path, tokenizer=str(folder)).cache_key
    config = json.loads((moved / "tokenizer_config.json").read_text())
    (moved / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": "<s>"}))
    assert _dm(tmp_path, tokenizer=str(moved)).cache_key != _dm(tmp_path, tokenizer=str(folder)).cache_key


def test_an_object_changed_after_construction_keeps_the_data_of_its_key(tmp_path: Path, folder: Path) -> None:
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    dm = _dm(tmp_path, tokenizer=hf)
    key = dm.cache_key
    hf.add_special_tokens({"pad_token": "<pad>"})  # after construction: the snapshot was taken
    dm.prepare_data()
    assert dm.cache_key == key and dm.tokenizer.token_to_id("<pad>") is None
    assert _dm(tmp_path, tokenizer=hf).cache_key != key
    assert (
        isinstance(dm.hparams["tokenizer"], str)
        and dm.config.tokenizer_source.digest in dm.hparams["tokenizer"]
    )


@pytest.mark.parametrize("name", ["meta-llama/Llama-2-7b-hf", "gpt2"])
def test_a_name_that_is_not_a_local_path_is_refused(tmp_path: Path, monkeypatch: Any, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError) as info:
        _dm(tmp_path, tokenizer=name)
    message = str(info.value)
    assert info.value.step == "build_vocab" and f"tokenizer {name!r} is not a local file or folder" in message
    assert "not downloaded" in message and "tokenizer.json" in message


def test_a_folder_without_tokenizer_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "tokenizer.model").write_bytes(b"\0")
    with pytest.raises(DataError, match=r"folder without a tokenizer\.json") as info:
        _dm(tmp_path, tokenizer=str(tmp_path / "slow"))
    assert "save_pretrained" in str(info.value)


def test_tokenizer_and_tokenizer_file_together_are_refused(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(DataError, match="tokenizer and tokenizer_file were both given"):
        _dm(tmp_path, tokenizer=str(folder), tokenizer_file=str(folder / "tokenizer.json"))


def test_an_object_without_a_fast_form_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="got dict") as info:
        _dm(tmp_path, tokenizer={"vocab": {}})
    assert "use_fast=True" in str(info.value)


def test_a_folder_without_the_eos_token_names_the_tokenizer_and_the_fix(tmp_path: Path, folder: Path) -> None:
    dm = _dm(tmp_path, tokenizer=str(folder), eos_token="<|endoftext|>")
    with pytest.raises(DataError) as info:
        dm.prepare_data()
    assert f"tokenizer {str(folder)!r} has no end-of-text token '<|endoftext|>'" in str(info.value)
    assert "eos_token=" in str(info.value)


def test_tokenizer_file_still_works(tmp_path: Path, docs: list[str]) -> None:
    path = tmp_path / "tokenizer.json"
    llama_style_tokenizer(docs).save(str(path))
    dm = _dm(tmp_path, tokenizer_file=str(path))
    dm.prepare_data()
    assert dm.ledger.latest("build_vocab").params["tokenizer_file"] == str(path) and dm.bos_token == "<s>"


# -- issue #42, item 5 ------------------------------------------------------------------------
@pytest.mark.parametrize("given", ["", "   "])
def test_an_empty_tokenizer_path_is_refused_not_read_as_the_working_folder(
    tmp_path: Path, folder: Path, monkeypatch: Any, given: str
) -> None:
    monkeypatch.chdir(folder)  # ./tokenizer.json is there, and must not be read
    with pytest.raises(DataError) as info:
        _dm(tmp_path, tokenizer=given)
    message = str(info.value)
    assert info.value.step == "build_vocab" and "\n" not in message
    assert f"tokenizer {given!r} is an empty path" in message and "tokenizer=None" in message


@pytest.mark.parametrize("where", ["the-path", "its-tokenizer-json"])
def test_a_dangling_link_is_named_as_such_not_as_a_hub_name(tmp_path: Path, where: str) -> None:
    given = link = tmp_path / "tok"
    if where == "its-tokenizer-json":  # a folder whose tokenizer.json links to nothing
        link.mkdir()
        link = link / "tokenizer.json"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(DataError) as info:
        _dm(tmp_path, tokenizer=str(given))
    message = str(info.value)
    assert (
        f"tokenizer {str(link)!r} does not exist (a dangling link to {str(tmp_path / 'gone')!r})" in message
    )
    assert "hub" not in message and "sentencepiece" not in message and "\n" not in message


@pytest.mark.parametrize(
    "settings",
    [
        {"chat_template": "{% for m in messages %}{{ m['content'] }}</s>{% endfor %}"},
        {"model_max_length": 4096},
    ],
    ids=["chat-template", "model-max-length"],
)
def test_a_folder_s_chat_template_and_model_max_length_are_read_outside_the_cache_key(
    tmp_path: Path, docs: list[str], settings: dict[str, Any]
) -> None:
    plain = llama_style_folder(tmp_path / "plain", docs)
    given = llama_style_folder(tmp_path / "given", docs, **settings)
    source = read_source(str(given))
    assert {k: source.settings[k] for k in settings} == settings
    # they do not shape the data: the same data, the same key
    assert _dm(tmp_path, tokenizer=str(given)).cache_key == _dm(tmp_path, tokenizer=str(plain)).cache_key


def test_a_chat_template_in_tokenizer_config_is_read_and_chat_template_jinja_wins(folder: Path) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": "old"}))
    assert read_source(str(folder)).settings["chat_template"] == "old"  # the older place
    (folder / "chat_template.jinja").write_text("new")
    assert read_source(str(folder)).settings["chat_template"] == "new"

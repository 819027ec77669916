"""``dm.hf_tokenizer`` and the tokenizer folder written beside checkpoints (issue #34, item 2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from lm_tokenizers import document_starts, llama_style_folder, prompt_of

from lightning_order import OrderedLMDataModule
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.hf_tokenizer import TOKENIZER_FOLDER, save_beside_checkpoints, save_tokenizer

transformers = pytest.importorskip("transformers")

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200, "num_partitions": 1}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> OrderedLMDataModule:
    root = tmp_path_factory.mktemp("hf_tok")
    folder = llama_style_folder(root / "llama", stdlib_corpus(200))
    dm = OrderedLMDataModule(cache_dir=str(root / "cache"), tokenizer=str(folder), eos_token="</s>", **SMALL)
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> OrderedLMDataModule:
    dm = OrderedLMDataModule(cache_dir=str(tmp_path_factory.mktemp("hf_trained")), **SMALL)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _assert_encodes_as_the_blocks(tokenizer: Any, dm: OrderedLMDataModule) -> None:
    stream = dm.blocks("val").reshape(-1)
    documents = dm.documents("val")
    for index, start in enumerate(document_starts(stream, dm.eos_token_id, 5)):
        ids = tokenizer(prompt_of(documents[index])).input_ids
        assert stream[start : start + len(ids)].tolist() == ids, index


def test_hf_tokenizer_has_its_special_tokens_and_encodes_a_prompt_as_the_blocks(
    llama: OrderedLMDataModule,
) -> None:
    hf = llama.hf_tokenizer
    assert isinstance(hf, transformers.PreTrainedTokenizerFast)
    assert (hf.eos_token, hf.bos_token, hf.pad_token, hf.unk_token) == ("</s>", "<s>", "</s>", None)
    assert (hf.eos_token_id, hf.bos_token_id) == (llama.eos_token_id, 1) and len(hf) == llama.vocab_size
    assert hf("Hello").input_ids[0] == 1 and hf("Hello").input_ids[-1] != llama.eos_token_id
    _assert_encodes_as_the_blocks(hf, llama)
    assert llama.hf_tokenizer is hf  # built once for the tokenizer in use


def test_hf_tokenizer_of_a_trained_bpe_has_no_bos_and_pads_with_eos(trained: OrderedLMDataModule) -> None:
    hf = trained.hf_tokenizer
    assert (hf.eos_token, hf.bos_token, hf.pad_token) == ("<|endoftext|>", None, "<|endoftext|>")
    _assert_encodes_as_the_blocks(hf, trained)


def test_a_missing_transformers_is_named_with_the_install(
    trained: OrderedLMDataModule, monkeypatch: Any
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    dm = OrderedLMDataModule(cache_dir=trained.cache_dir, **SMALL)  # the warm cache, no wrapper built yet
    with pytest.raises(
        ImportError, match=r"needs the optional dependency transformers .*pip install transformers"
    ):
        _ = dm.hf_tokenizer


def test_the_saved_folder_loads_with_autotokenizer_and_encodes_as_the_blocks(
    llama: OrderedLMDataModule, tmp_path: Path
) -> None:
    folder = save_tokenizer(tmp_path / "tok", llama.tokenizer, llama.ledger.info["special_tokens"])
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (loaded.bos_token, loaded.eos_token) == ("<s>", "</s>")
    _assert_encodes_as_the_blocks(loaded, llama)
    save_tokenizer(folder, llama.tokenizer, llama.ledger.info["special_tokens"])  # replaced in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]


def test_without_transformers_tokenizer_json_is_saved_alone(
    llama: OrderedLMDataModule, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.warns(UserWarning, match="wrote tokenizer.json alone"):
        folder = save_tokenizer(tmp_path / "tok", llama.tokenizer, {"eos_token": "</s>"})
    assert [p.name for p in folder.iterdir()] == ["tokenizer.json"]


class _Trainer:
    def __init__(self, dirpath: Path | None, zero: bool = True) -> None:
        self.checkpoint_callback = type("C", (), {"dirpath": None if dirpath is None else str(dirpath)})()
        self.is_global_zero = zero


def test_beside_checkpoints_only_on_rank_zero_and_with_a_dirpath(
    llama: OrderedLMDataModule, tmp_path: Path
) -> None:
    special = llama.ledger.info["special_tokens"]
    assert save_beside_checkpoints(_Trainer(tmp_path, zero=False), llama.tokenizer, special) is None
    assert save_beside_checkpoints(_Trainer(None), llama.tokenizer, special) is None
    assert not list(tmp_path.iterdir())
    folder = save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special)
    assert folder == tmp_path / TOKENIZER_FOLDER and (folder / "tokenizer_config.json").is_file()


# -- issue #42, item 5: the supplied folder's chat_template and model_max_length are kept ------
TEMPLATE = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"


def test_chat_template_and_model_max_length_reach_hf_tokenizer_and_the_saved_folder(
    tmp_path: Path, llama: OrderedLMDataModule
) -> None:
    folder = llama_style_folder(
        tmp_path / "chat", stdlib_corpus(200), chat_template=TEMPLATE, model_max_length=4096
    )
    # the same content but its settings: the warm cache of the llama fixture serves it
    dm = OrderedLMDataModule(cache_dir=llama.cache_dir, tokenizer=str(folder), eos_token="</s>", **SMALL)
    assert dm.cache_key == llama.cache_key
    dm.prepare_data()
    dm.setup("fit")
    messages = [{"role": "user", "content": "Hello"}]
    hf = dm.hf_tokenizer
    assert (hf.chat_template, hf.model_max_length) == (TEMPLATE, 4096)
    trainer = _Trainer(tmp_path / "ckpt")
    dm.trainer = trainer  # what Lightning sets; state_dict writes the folder beside the checkpoints
    dm.state_dict()
    loaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "ckpt" / TOKENIZER_FOLDER))
    assert (loaded.chat_template, loaded.model_max_length) == (TEMPLATE, 4096)
    assert loaded.apply_chat_template(messages, tokenize=False) == "<s>user: Hello</s>"
    _assert_encodes_as_the_blocks(loaded, dm)

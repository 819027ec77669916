"""``dm.hf_tokenizer`` and the tokenizer folder written beside checkpoints (issue #34, item 2)."""

from __future__ import annotations

import builtins
import os
import re
import stat
import sys
import warnings
from pathlib import Path
from typing import Any

import fsspec
import pytest
from lm_tokenizers import document_starts, llama_style_folder, prompt_of

from lightning_order import OrderedLMDataModule, OutputWarning
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.hf_tokenizer import (
    TOKENIZER_FOLDER,
    hf_tokenizer_of,
    save_beside_checkpoints,
    save_tokenizer,
)
from lightning_order.outputs import OWNERSHIP_FILE

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
    assert sorted(p.name for p in folder.iterdir()) == [OWNERSHIP_FILE, "tokenizer.json"]


class _Trainer:
    def __init__(self, dirpath: Path | str | None, zero: bool = True) -> None:
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


# -- issue #42 item 1: the folder beside the checkpoints is ours, or it is left alone ----------------


def _state(path: Path) -> Any:
    """What is at ``path``, to compare before and after: a link's target, a file's bytes, a folder's files."""
    if path.is_symlink():
        return ("link", str(path.readlink()), _state(path.resolve()))
    if path.is_file():
        return path.read_bytes()
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _foreign(kind: str, target: Path, dm: OrderedLMDataModule) -> None:
    special = dm.ledger.info["special_tokens"]
    if kind == "notes":
        target.mkdir()
        (target / "notes.md").write_text("what this tokenizer is for\n")
    elif kind == "hf folder":  # the very folder passed as tokenizer=, its chat template set
        hf = hf_tokenizer_of(dm.tokenizer, special)
        hf.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        hf.save_pretrained(str(target))
    elif kind == "file":
        target.write_text("not a folder")
    elif kind == "symlink":
        elsewhere = target.with_name("elsewhere")
        elsewhere.mkdir()
        (elsewhere / "tokenizer.json").write_text("{}")
        target.symlink_to(elsewhere, target_is_directory=True)
    else:  # ours, then changed by hand: a file edited, or one added
        save_beside_checkpoints(_Trainer(target.parent), dm.tokenizer, special)
        if kind == "ours, edited":
            (target / "tokenizer_config.json").write_text('{"edited": true}')
        else:
            (target / "README.md").write_text("trained on the stdlib corpus")


@pytest.mark.parametrize(
    "kind", ["notes", "hf folder", "file", "symlink", "ours, edited", "ours, file added"]
)
def test_what_lightning_order_did_not_write_is_never_replaced(
    llama: OrderedLMDataModule, tmp_path: Path, kind: str
) -> None:
    """#42 item 1: a user's folder, a file or a symlink at ``tokenizer/`` stays as it is, at every save,
    with a one-line warning naming the path and the fix; the run goes on."""
    target = tmp_path / TOKENIZER_FOLDER
    _foreign(kind, target, llama)
    before, siblings = _state(target), sorted(p.name for p in tmp_path.iterdir())
    for _ in range(2):  # the second checkpoint as the first
        with pytest.warns(
            OutputWarning, match=rf"^{re.escape(str(target))}: .*not replaced.*remove it"
        ) as caught:
            assert save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, {"eos_token": "</s>"}) is None
        assert "\n" not in str(caught[0].message)
    assert _state(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == siblings  # nothing moved aside, no temp folder


def test_our_folder_respects_the_umask_and_is_written_once_per_content(
    llama: OrderedLMDataModule, tmp_path: Path
) -> None:
    special = dict(llama.ledger.info["special_tokens"])
    old = os.umask(0o027)
    try:
        folder = save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special)
    finally:
        os.umask(old)
    assert folder == tmp_path / TOKENIZER_FOLDER
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750
    assert stat.S_IMODE((folder / "tokenizer.json").stat().st_mode) == 0o640
    written = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special) == folder
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()} == written  # untouched
    special["pad_token"] = "<s>"  # the content changed: our folder is replaced
    assert save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special) == folder
    assert transformers.AutoTokenizer.from_pretrained(str(folder)).pad_token == "<s>"
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOKENIZER_FOLDER]


def test_a_folder_the_os_refuses_to_write_is_a_warning_not_the_end_of_the_run(
    llama: OrderedLMDataModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only checkpoint folder (simulated: the tests may run as root, who writes anywhere)."""
    denied = str(tmp_path)

    def refuse(path: Any) -> bool:
        return str(os.fspath(path)).startswith(denied)

    real_open, real_mkdir = builtins.open, os.mkdir

    def read_only_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and refuse(file) and set(mode) & set("wax+"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *args, **kwargs)

    def read_only_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if refuse(path):
            raise PermissionError(13, "Permission denied", str(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only_open)
    monkeypatch.setattr(os, "mkdir", read_only_mkdir)
    target = tmp_path / TOKENIZER_FOLDER
    with pytest.warns(OutputWarning, match=rf"^{re.escape(str(target))}: not written \(.*Permission denied"):
        assert save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, {"eos_token": "</s>"}) is None
    assert not list(tmp_path.iterdir())


def test_an_fsspec_dirpath_gets_the_folder_in_its_own_storage(
    llama: OrderedLMDataModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#42 item 9: ``memory://`` (as ``s3://``) is written through fsspec, never as a local ``memory:`` folder."""
    monkeypatch.chdir(tmp_path)
    fs = fsspec.filesystem("memory")
    url = f"memory://{tmp_path.name}/checkpoints"
    try:
        folder = save_beside_checkpoints(_Trainer(url), llama.tokenizer, llama.ledger.info["special_tokens"])
        assert folder == f"{url}/{TOKENIZER_FOLDER}"
        assert fs.cat(f"{folder}/tokenizer.json") == llama.tokenizer.to_str(pretty=True).encode()
        assert fs.exists(f"{folder}/tokenizer_config.json")
        assert (
            save_beside_checkpoints(_Trainer(url), llama.tokenizer, llama.ledger.info["special_tokens"])
            == folder
        )
        assert not list(tmp_path.iterdir())  # no local folder named memory:
    finally:
        fs.rm(url, recursive=True)


def test_our_folder_made_read_only_is_not_replaced(
    llama: OrderedLMDataModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``chmod -w`` on our folder is kept (simulated through ``os.access``: root may write anywhere)."""
    special = dict(llama.ledger.info["special_tokens"])
    folder = save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special)
    assert isinstance(folder, Path)
    before = _state(folder)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: p != str(folder) and real_access(p, mode, **kw))
    special["pad_token"] = "<s>"  # a new content to write
    with pytest.warns(
        OutputWarning, match=rf"^{re.escape(str(folder))}: not written \(PermissionError.*read-only"
    ):
        assert save_beside_checkpoints(_Trainer(tmp_path), llama.tokenizer, special) is None
    assert _state(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == [TOKENIZER_FOLDER]


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

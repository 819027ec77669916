"""Bad input to OrderedLMDataModule: each a clear lightning_order error naming the step and the fix, no cache left."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from lightning_order import DataError, OrderedLMDataModule
from lightning_order.data.engine.storage import file_digest
from lightning_order.data.lm.corpus import stdlib_corpus

TINY = {"max_documents": 60, "vocab_size": 300, "block_size": 16}


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def _no_cache_left(root: Path) -> None:
    """Nothing a later run could trust: no prepared folder, no temporary one (only lock files)."""
    left = [p.name for p in root.iterdir() if not p.name.endswith(".lock")] if root.exists() else []
    assert left == []


def _tokenizer_file(path: Path, with_eos: bool) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<|endoftext|>"] if with_eos else []
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(["Return the value of the attribute.", "A list of names."] * 20, trainer)
    tokenizer.save(str(path))
    return path


def test_empty_documents_are_dropped_and_counted(tmp_path: Path) -> None:
    words = "the module reads a file and returns its lines one by one".split()
    texts = [" ".join([*words[i % 5 :], str(i)]) * 3 for i in range(60)] + ["", "   \n\t ", "<|endoftext|>"]
    dm = OrderedLMDataModule(
        dataset="json",
        data_files=str(_jsonl(tmp_path / "d.jsonl", texts)),
        vocab_size=300,
        block_size=16,
        cache_dir=str(tmp_path / "c"),
    )
    clean = dm.ledger.latest("clean")
    assert clean.stats["dropped_empty"] == 3 and clean.stats["rows"] == 60


@pytest.mark.parametrize(
    ("texts", "step", "words"),
    [
        (["", " \n "], "clean", "no document is left"),
        (
            stdlib_corpus(20),
            "pack",
            "block_size=100000 cannot be filled",
        ),
    ],
    ids=["all-empty", "block-size-unfillable"],
)
def test_corpus_that_cannot_be_prepared(tmp_path: Path, texts: list[str], step: str, words: str) -> None:
    data = _jsonl(tmp_path / "d.jsonl", texts)
    root = tmp_path / "cache"
    dm = OrderedLMDataModule(
        dataset="json",
        data_files=str(data),
        vocab_size=300,
        block_size=100000,
        val_fraction=0.5,
        cache_dir=str(root),
    )
    with pytest.raises(DataError) as err:
        dm.prepare_data()
    assert err.value.step == step and words in str(err.value)
    _no_cache_left(root)


def test_fewer_blocks_than_ranks(tmp_path: Path) -> None:
    dm = OrderedLMDataModule(**TINY, cache_dir=str(tmp_path))
    blocks = dm.ledger.latest("pack").stats["train_blocks"]
    dm.trainer = SimpleNamespace(world_size=blocks + 1, global_rank=0)
    with pytest.raises(DataError) as err:
        dm.setup("fit")
    assert err.value.step == "shard"
    assert f"{blocks} blocks, fewer than the {blocks + 1} ranks" in str(err.value)
    assert "lower block_size" in str(err.value)


def test_missing_tokenizer_file(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        OrderedLMDataModule(tokenizer_file=str(tmp_path / "nope.json"), cache_dir=str(tmp_path))
    assert err.value.step == "build_vocab" and "does not exist" in str(err.value)
    _no_cache_left(tmp_path)


@pytest.mark.parametrize(
    ("content", "words"),
    [("corrupt", "not a readable tokenizer.json"), ("no-eos", "has no end-of-text token")],
)
def test_unusable_tokenizer_file(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "tokenizer.json"
    if content == "corrupt":
        path.write_text('{"version": "1.0", "model": {')
    else:
        _tokenizer_file(path, with_eos=False)
    root = tmp_path / "cache"
    dm = OrderedLMDataModule(**TINY, tokenizer_file=str(path), cache_dir=str(root))
    with pytest.raises(DataError) as err:
        dm.prepare_data()
    assert err.value.step == "build_vocab" and words in str(err.value)
    _no_cache_left(root)


def test_tokenizer_file_is_used_and_recorded_by_content_hash(tmp_path: Path) -> None:
    path = _tokenizer_file(tmp_path / "tokenizer.json", with_eos=True)
    dm = OrderedLMDataModule(**TINY, tokenizer_file=str(path), cache_dir=str(tmp_path / "c"))
    record = dm.ledger.latest("build_vocab")
    assert record.params["xxh3"] == file_digest(path)
    assert dm.tokenizer.to_str() == Tokenizer.from_file(str(path)).to_str()
    key = dm.cache_key
    _tokenizer_file(path, with_eos=True)  # the same training again...
    Tokenizer.from_file(str(path)).add_special_tokens(["<pad>"])
    tok = Tokenizer.from_file(str(path))
    tok.add_special_tokens(["<pad>"])
    tok.save(str(path))  # ...then changed: another cache
    assert (
        OrderedLMDataModule(**TINY, tokenizer_file=str(path), cache_dir=str(tmp_path / "c")).cache_key != key
    )


@pytest.mark.parametrize(
    ("kwargs", "step"),
    [
        ({"block_size": 0}, "pack"),
        ({"block_size": True}, "pack"),
        ({"vocab_size": 100}, "build_vocab"),
        ({"pad_vocab_multiple": 0}, "build_vocab"),
        ({"dedup_threshold": 1.5}, "dedup"),
        ({"val_fraction": 1.0}, "split"),
        ({"max_documents": 0}, "load"),
    ],
    ids=lambda v: str(v),
)
def test_bad_arguments_name_their_step(tmp_path: Path, kwargs: dict, step: str) -> None:
    with pytest.raises(DataError) as err:
        OrderedLMDataModule(**kwargs, cache_dir=str(tmp_path))
    assert err.value.step == step
    assert f"{next(iter(kwargs))} must" in str(err.value)


def test_missing_text_column(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"body": "text"}) + "\n")
    dm = OrderedLMDataModule(dataset="json", data_files=str(data), cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError) as err:
        dm.prepare_data()
    assert err.value.step == "load" and err.value.column == "text"
    _no_cache_left(tmp_path / "c")

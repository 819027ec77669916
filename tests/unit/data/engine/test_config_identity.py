"""The cache identity is derived from the config fields: every field changes the key unless marked.

Each field of each pipeline's config is changed to a valid other value, one at a time; the cache
key must change exactly for the fields that shape the data (the lists below are written here, by
reading what each field does, not read back from the marks they check).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from lightning_order.data.engine.config import SERVING_FIELDS
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.prepare import cache_key as lm_cache_key
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.prepare import cache_key as text_cache_key

ORDER = ("load", "clean")

#: Fields that only serve the data: the key never changes with them.
SERVING = {"num_proc", "batch_size", "num_workers", "shuffle", "cache_dir", "enforce", "lock_timeout", "storage_options"}
#: LM fields that choose where the work runs, or how blocks are served: the prepared data is the same.
LM_SERVING = SERVING | {
    "engine",
    "ray_address",
    "batch_format",
    "document_attention",
    "mixture_tolerance",
    "shard_validation",
}


def _other_values(tmp_path: Path) -> dict[str, Any]:
    """A valid value other than the default for every field of both configs."""
    files = tmp_path / "corpus"
    files.mkdir()
    (files / "a.txt").write_text("one document\n", encoding="utf-8")
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}", encoding="utf-8")
    return {
        "dataset": "text",
        "data_files": str(files / "a.txt"),
        "text_column": "body",
        "val_fraction": 0.2,
        "seed": 1,
        "vocab_size": 4096,
        "num_proc": 3,
        "dataset_config": "plain",
        "load_split": "validation",
        "input_hash": "size_mtime",
        "batch_size": 8,
        "num_workers": 1,
        "shuffle": False,
        "cache_dir": str(tmp_path / "cache"),
        "order": ["load"],
        "enforce": False,
        "lock_timeout": 5.0,
        "storage_options": {"anon": True},
        # classification
        "label_column": "y",
        "numeric_columns": ("x",),
        "group_column": "g",
        "tokenizer": "bpe",
        "max_length": 64,
        "demo_size": 500,
        "lowercase": False,
        "demo_sources": 2,
        "demo_seed": 7,
        "engineered_features": ("length",),
        "overrides": {"clean": "0123456789abcdef"},
        # language modelling
        "block_size": 64,
        "tokenizer_file": str(tokenizer),
        "bos_token": "<s>",
        "pad_vocab_multiple": 8,
        "dedup_threshold": 0.9,
        "max_documents": 10,
        "sample_by": "line",
        "eos_token": "</s>",
        "num_partitions": 4,
        "batch_format": "hf",
        "document_attention": True,
        "tokenizer_train_bytes": 1 << 20,
        "engine": "ray",
        "ray_address": "auto",
        "eos": False,
        "sources": {str(files / "a.txt"): 1.0},  # a mixture of one source: the built-in corpus replaced
        "mixture_tolerance": 0.05,
        "shard_validation": False,
    }


def _changed(config_class: type, key: Any, base: dict[str, Any], values: dict[str, Any]) -> set[str]:
    """The fields whose change (alone, from ``base``) changes the cache key."""
    before = key(config_class(**base), ORDER)
    changed = set()
    for item in fields(config_class):
        config = config_class(**{**base, item.name: values[item.name]})
        # The order request enters as the order it resolves to (the DataModule resolves it).
        order = tuple(config.order) if item.name == "order" else ORDER
        if key(config, order) != before:
            changed.add(item.name)
    return changed


def test_every_field_is_given_another_value(tmp_path: Path) -> None:
    values = _other_values(tmp_path)
    for config_class in (DataConfig, LMConfig):
        assert {f.name for f in fields(config_class)} <= set(values), config_class.__name__


@pytest.mark.parametrize("source", ["demo", "files"])
def test_text_key_changes_exactly_for_the_shaping_fields(tmp_path: Path, source: str) -> None:
    values = _other_values(tmp_path)
    names = {f.name for f in fields(DataConfig)}
    if source == "demo":
        base: dict[str, Any] = {}
        values["dataset"] = str(tmp_path / "corpus")  # a local dataset folder: no data_files needed
        # input_hash only changes how input files are identified: the demo corpus has none.
        expected = names - SERVING - {"input_hash"}
    else:
        base = {"dataset": "text", "data_files": values["data_files"]}
        values = {**values, "dataset": "json", "data_files": values["data_files"]}
        # The demo corpus's fields shape nothing when files are read.
        expected = names - SERVING - {"demo_size", "demo_sources", "demo_seed", "data_files"}
    assert _changed(DataConfig, text_cache_key, base, values) == expected


@pytest.mark.parametrize("source", ["builtin", "files"])
def test_lm_key_changes_exactly_for_the_shaping_fields(tmp_path: Path, source: str) -> None:
    values = _other_values(tmp_path)
    values["tokenizer"] = values["tokenizer_file"]  # LMConfig.tokenizer is a supplied tokenizer's path
    names = {f.name for f in fields(LMConfig)}
    if source == "builtin":
        base: dict[str, Any] = {}
        values["dataset"] = str(tmp_path / "corpus")
        # sample_by only cuts dataset="text" files; input_hash only identifies input files.
        expected = names - LM_SERVING - {"sample_by", "input_hash"}
    else:
        base = {"dataset": "text", "data_files": values["data_files"]}
        other = tmp_path / "b.txt"
        other.write_text("another document\n", encoding="utf-8")
        # sources replaces dataset and data_files (refused together): left at its default here.
        values = {**values, "dataset": "json", "data_files": str(other), "sources": None}
        expected = names - LM_SERVING - {"sources"}
    assert _changed(LMConfig, lm_cache_key, base, values) == expected


def test_the_serving_fields_are_the_marked_ones() -> None:
    assert set(SERVING_FIELDS) == SERVING
    marked = {f.name for f in fields(LMConfig) if f.metadata.get("serving")}
    assert marked == LM_SERVING


def test_a_new_unmarked_field_enters_the_key() -> None:
    """A field added without a mark is in the key at once (no list to forget it in)."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Extended(DataConfig):
        window: int = 3

    base = Extended().identity(ORDER)
    assert base["window"] == 3
    assert Extended(window=4).identity(ORDER) != base

"""``lightning_order.data.text.config``: ``DataConfig`` validation, identity, and its typed choices in the CLI."""

from __future__ import annotations

import pytest

from lightning_order import OrderedDataModule
from lightning_order.data.engine.config import override_identity
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.demo import DEMO_NUMERIC_COLUMNS
from lightning_order.errors import DataError


@pytest.mark.parametrize(
    ("kwargs", "step", "argument"),
    [
        ({"val_fraction": 0.0}, "split", "val_fraction"),
        ({"val_fraction": "0.1"}, "split", "val_fraction"),
        ({"vocab_size": 5}, "build_vocab", "vocab_size"),
        ({"tokenizer": "unigram"}, "build_vocab", "tokenizer"),
        ({"max_length": 0}, "encode", "max_length"),
        ({"num_proc": 0}, "load", "num_proc"),
        ({"demo_sources": 0}, "load", "demo_sources"),
    ],
)
def test_bad_values_name_the_argument_and_what_was_given(kwargs, step, argument):
    with pytest.raises(DataError) as info:
        DataConfig(**kwargs)
    assert info.value.step == step
    assert argument in str(info.value) and repr(next(iter(kwargs.values()))) in str(info.value)


def test_identity_changes_with_what_shapes_the_data():
    base = DataConfig()
    assert base.numeric_columns == DEMO_NUMERIC_COLUMNS  # the demo brings its own columns
    assert base.identity(["load"]) == DataConfig().identity(["load"])
    for change in ({"seed": 1}, {"demo_seed": 1}, {"lowercase": False}, {"tokenizer": "bpe"}):
        assert DataConfig(**change).identity(["load"]) != base.identity(["load"]), change
    assert base.identity(["load"]) != base.identity(["load", "clean"])
    assert DataConfig(num_proc=4).identity(["load"]) == base.identity(["load"])  # speed only


def test_from_arguments_takes_its_fields_only():
    config = DataConfig.from_arguments(
        {"seed": 3, "batch_size": 8, "self": object()}, engineered_features=("a",)
    )
    assert config.seed == 3 and config.engineered_features == ("a",)


def test_override_identity_hashes_overridden_methods_only():
    class Custom(OrderedDataModule):
        def clean(self, batch):
            return batch

    ids = override_identity(Custom, OrderedDataModule, ("clean", "engineer_features"))
    assert set(ids) == {"clean"} and len(ids["clean"]) == 16
    assert override_identity(OrderedDataModule, OrderedDataModule, ("clean",)) == {}


def test_tokenizer_choices_are_typed_for_the_cli(tmp_path):
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(OrderedDataModule, "data")
    assert parser.parse_args(["--data.tokenizer=bpe"]).data.tokenizer == "bpe"
    with pytest.raises(Exception, match="tokenizer"):
        parser.parse_args(["--data.tokenizer=sentencepiece"])  # refused when parsed, before any work
    assert "wordpiece" in parser.format_help() and "bpe" in parser.format_help()

"""The DataModules' constructors are built from their config dataclasses (each argument declared once).

The keywords, their defaults and their positional order are the public contract: written out
here as they were when each argument was still written twice, so a change to a config field that
would break a user's call shows.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import subprocess
import sys
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest

from lightning_order import OrderedDataModule, OrderedLMDataModule
from lightning_order.data.engine.arguments import (
    after,
    config_constructor,
    constructor_fields,
    positional_order,
)
from lightning_order.data.engine.config import field_docs
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.text.config import DataConfig

ROOT = Path(__file__).resolve().parents[4]

TEXT_CONTRACT = [
    ("dataset", None), ("data_files", None), ("text_column", "text"), ("label_column", "label"),
    ("numeric_columns", ()), ("group_column", None), ("val_fraction", 0.1), ("seed", 0),
    ("vocab_size", 8000), ("tokenizer", "wordpiece"), ("max_length", 128), ("batch_size", 32),
    ("num_workers", 0), ("num_proc", None), ("cache_dir", None), ("demo_size", 20000), ("order", None),
    ("enforce", True), ("dataset_config", None), ("load_split", "train"), ("lowercase", True),
    ("demo_sources", 1), ("demo_seed", 0), ("shuffle", True), ("pipeline", None),
    ("input_hash", "content"), ("lock_timeout", None), ("storage_options", None),
]  # fmt: skip
LM_CONTRACT = [
    ("dataset", None), ("data_files", None), ("text_column", "text"), ("val_fraction", 0.1), ("seed", 0),
    ("vocab_size", 8000), ("batch_size", 32), ("num_workers", 0), ("num_proc", None), ("cache_dir", None),
    ("order", None), ("enforce", True), ("block_size", 128), ("tokenizer_file", None),
    ("pad_vocab_multiple", 64), ("dedup_threshold", 0.8), ("max_documents", None),
    ("dataset_config", None), ("load_split", "train"), ("input_hash", "content"), ("shuffle", True),
    ("eos", True), ("sample_by", "document"), ("eos_token", "<|endoftext|>"), ("num_partitions", None),
    ("tokenizer_train_bytes", 128 << 20), ("engine", "local"), ("ray_address", None),
    ("lock_timeout", None), ("batch_format", "auto"), ("document_attention", False),
    ("tokenizer", None), ("bos_token", "auto"), ("sources", None), ("mixture_tolerance", 0.01),
    ("shard_validation", True), ("storage_options", None),
]  # fmt: skip
CASES = [(OrderedDataModule, DataConfig, TEXT_CONTRACT), (OrderedLMDataModule, LMConfig, LM_CONTRACT)]


def _parameters(cls: type) -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"]


@pytest.mark.parametrize(("module", "config", "contract"), CASES)
def test_keywords_defaults_and_positional_order_are_kept(module: type, config: type, contract: list) -> None:
    assert [(p.name, p.default) for p in _parameters(module)] == contract


@pytest.mark.parametrize(("module", "config", "contract"), CASES)
def test_each_argument_is_the_config_field(module: type, config: type, contract: list) -> None:
    """Name, default, type and docstring come from the one declaration in the config dataclass."""
    by_name = {f.name: f for f in fields(config)}
    docs = field_docs(config)
    hints = typing.get_type_hints(config)
    for parameter in _parameters(module):
        if parameter.name == "pipeline":
            continue
        item = by_name[parameter.name]
        assert item.default is not MISSING and parameter.default == item.default
        assert parameter.annotation == hints[parameter.name]
        assert " ".join(docs[parameter.name].split()[:4]) in " ".join((module.__doc__ or "").split())
    assert {p.name for p in _parameters(module)} - {"pipeline"} == set(constructor_fields(config))


def test_a_value_given_by_position_reaches_the_config() -> None:
    dm = OrderedLMDataModule(None, None, "text", 0.2, 3, 4096, 8)
    assert (dm.config.val_fraction, dm.config.seed, dm.config.vocab_size, dm.config.batch_size) == (
        0.2,
        3,
        4096,
        8,
    )
    text = OrderedDataModule(None, None, "text", "y", (), None, 0.3, demo_size=100)
    assert (text.config.label_column, text.config.val_fraction) == ("y", 0.3)


def test_hyperparameters_are_every_argument_of_the_call_but_the_credentials() -> None:
    dm = OrderedLMDataModule(block_size=64, storage_options={"secret": "not-for-hparams-yaml"})
    # storage_options (repr=False: credentials) would reach hparams.yaml and every checkpoint
    everything_else = {k: v for k, v in LM_CONTRACT if k != "storage_options"}
    assert dict(dm.hparams) == {**everything_else, "block_size": 64}


def test_a_subclass_keeps_its_own_and_the_config_arguments() -> None:
    class Custom(OrderedDataModule):
        def __init__(self, window: int = 2, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.window = window

    dm = Custom(window=5, demo_size=100, seed=4)
    assert (dm.hparams["window"], dm.hparams["seed"], dm.hparams["demo_size"]) == (5, 4, 100)
    assert "pipeline" not in dm.hparams  # an object, not a hyperparameter
    assert dm.config.seed == 4


def test_an_unknown_keyword_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="blok_size"):
        OrderedLMDataModule(blok_size=64)  # type: ignore[call-arg]


def test_an_order_that_misses_a_field_is_refused_when_the_class_is_made() -> None:
    # Python < 3.12 wraps an error raised in __set_name__ in a RuntimeError (the TypeError its cause).
    with pytest.raises((TypeError, RuntimeError)) as info:

        class Broken(OrderedLMDataModule):
            @config_constructor(LMConfig, ("dataset",))
            def __init__(self, arguments: dict[str, Any]) -> None:
                pass

    error = info.value.__cause__ or info.value
    assert isinstance(error, TypeError) and "must name each public field" in str(error)
    assert "block_size" in str(error)


def test_no_locals_plumbing_in_the_package() -> None:
    calls = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "lightning_order").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "locals"
    ]
    assert calls == []


@pytest.mark.slow
def test_mypy_sees_the_generated_keywords(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    use = tmp_path / "use.py"
    use.write_text(
        "from lightning_order import OrderedDataModule, OrderedLMDataModule\n"
        "OrderedLMDataModule(block_size=64, max_documents=10)\n"
        "OrderedDataModule('csv', 'a.csv', 'text', 'label', pipeline=None, numeric_columns=['x'])\n"
        "OrderedLMDataModule(block_size='64')\n"
        "OrderedLMDataModule(blok_size=64)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", str(use)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["4", "5"], result.stdout
    assert '"block_size"' in errors[0] and '"int"' in errors[0] and "blok_size" in errors[1]


def test_the_lm_signature_is_main_s_names_kinds_defaults_and_types() -> None:
    """Read from the fields now (issue #44 item 4), the signature is the one written out by hand before (the golden file)."""
    golden = json.loads((ROOT / "tests" / "golden" / "lm_datamodule_signature.json").read_text())
    now = [
        [p.name, p.kind.name, repr(p.default), str(p.annotation)] for p in _parameters(OrderedLMDataModule)
    ]
    assert now == golden


def test_the_lm_positional_order_is_read_from_the_fields_not_written_out() -> None:
    assert positional_order(LMConfig) == tuple(p.name for p in _parameters(OrderedLMDataModule))
    source = (ROOT / "lightning_order" / "data" / "lm" / "datamodule.py").read_text()
    assert "_POSITIONAL_ORDER" not in source and '"mixture_tolerance"' not in source


def test_a_new_field_is_the_last_argument_and_after_places_one_where_it_says() -> None:
    @dataclass(frozen=True)
    class Wider(LMConfig):
        window: int = field(default=3, kw_only=True)
        stride: int = field(default=1, kw_only=True, metadata=after("seed"))
        jump: int = field(default=2, kw_only=True)

    order = positional_order(Wider)
    # A field declared last follows every field declared before it (the base's fields declared
    # since the LM's fields were placed still trail them): no positional call changes meaning.
    assert order[order.index("shard_validation") + 1] == "window", order
    assert order[order.index("seed") + 1 : order.index("seed") + 3] == ("stride", "jump")
    assert positional_order(DataConfig, ("pipeline",))[-1] == "pipeline"


def test_after_a_name_not_placed_yet_is_refused() -> None:
    @dataclass(frozen=True)
    class Broken(LMConfig):
        early: int = field(default=0, kw_only=True, metadata=after("later"))
        later: int = field(default=0, kw_only=True)

    with pytest.raises(TypeError, match=r"after\('later'\) names no argument placed before it"):
        positional_order(Broken)


def test_the_text_signature_is_main_s_and_its_order_is_read_from_the_fields() -> None:
    """The text DataModule's order, written out by hand before, is read from the fields and two
    ``moved`` places (issue #44 item 4): the signature is the golden one of main before."""
    golden = json.loads((ROOT / "tests" / "golden" / "text_datamodule_signature.json").read_text())
    now = [[p.name, p.kind.name, repr(p.default), str(p.annotation)] for p in _parameters(OrderedDataModule)]
    assert now == golden
    source = (ROOT / "lightning_order" / "data" / "text" / "datamodule.py").read_text()
    assert '"demo_seed",\n' not in source  # no list of the fields' names


def test_moved_places_a_base_field_after_another_and_refuses_an_unknown_anchor() -> None:
    order = positional_order(DataConfig, ("pipeline",), moved={"shuffle": "seed"})
    assert order[order.index("seed") + 1] == "shuffle"
    with pytest.raises(TypeError, match="moved 'shuffle' after 'nowhere'"):
        positional_order(DataConfig, moved={"shuffle": "nowhere"})

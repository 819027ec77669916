"""Step fingerprints follow the config fields each step declares (issue 44, item 2).

Every field of both pipelines' configs is changed, one at a time, and the planned ledgers
compared: exactly the steps that declare the field, and the steps that consume theirs, get new
fingerprints. The fields come from the config dataclasses, not from a list here: a field added
later fails these tests until a step declares it or it is marked as serving the data
(``SERVES``). A real preparation of each pipeline, with a config that notes every attribute a
step reads, proves that the declarations are complete (no step reads a field that shapes the
data without declaring it) and that each step's output is made from the runner's declared
fingerprint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
from collections.abc import Iterator
from typing import Any

import pytest
from lm_tokenizers import llama_style_tokenizer

from lightning_order.data.engine.engines import LocalEngine
from lightning_order.data.engine.runner import (
    DataState,
    StepContext,
    StepRegistry,
    initial_state,
    plan,
    run_steps,
)
from lightning_order.data.lm.config import LMConfig
from lightning_order.data.lm.steps import LM_DATA_STEPS, LM_STEPS
from lightning_order.data.text.config import DataConfig
from lightning_order.data.text.prepare import feature_names
from lightning_order.data.text.steps import DATA_STEPS, STEPS
from lightning_order.errors import DataError
from lightning_order.ledger import StepLedger

#: A second value of every config field (the fields themselves come from the dataclasses).
#: ``None`` for ``order``: a changed order is another planned ledger, judged by the order rules.
TEXT_CHANGES: dict[str, Any] = {
    "dataset": "json",
    "data_files": "other",
    "text_column": "body",
    "val_fraction": 0.2,
    "seed": 1,
    "vocab_size": 4000,
    "num_proc": 3,
    "dataset_config": "named",
    "load_split": "test",
    "input_hash": "size_mtime",
    "batch_size": 16,
    "num_workers": 2,
    "shuffle": False,
    "cache_dir": "/tmp/elsewhere",
    "order": None,
    "enforce": False,
    "lock_timeout": 5.0,
    "storage_options": {"anon": True},
    "label_column": "y",
    "numeric_columns": ("a",),
    "group_column": "g",
    "tokenizer": "bpe",
    "max_length": 64,
    "demo_size": 1000,
    "lowercase": False,
    "demo_sources": 3,
    "demo_seed": 1,
    "engineered_features": ("n_chars",),
    "overrides": {"clean": "0123456789abcdef"},
}
LM_CHANGES: dict[str, Any] = {
    **{k: v for k, v in TEXT_CHANGES.items() if k in {f.name for f in dataclasses.fields(LMConfig)}},
    "dataset": "json",
    "vocab_size": 4096,
    "block_size": 64,
    "tokenizer_file": "tokenizer_file",
    "pad_vocab_multiple": 128,
    "dedup_threshold": 0.9,
    "max_documents": 10,
    "sample_by": "line",
    "eos_token": "</s>",
    "num_partitions": 8,
    "tokenizer_train_bytes": 1 << 20,
    "engine": "ray",
    "ray_address": "auto",
    "overrides": {"clean": "0123456789abcdef"},
    "eos": False,
    "batch_format": "hf",
    "document_attention": True,
    "shard_validation": False,
    "tokenizer": "tokenizer",
    "bos_token": "<s>",
    "sources": "sources",
    "mixture_tolerance": 0.05,
}
#: The fields changed on a config that reads files (``sample_by`` is read only with
#: ``dataset="text"``); the others are changed on the built-in corpus (the demo's fields are read
#: only without a dataset). ``_lm_configs`` gives the few others the base they need.
NEEDS_FILES = {
    "dataset",
    "data_files",
    "input_hash",
    "sample_by",
    "dataset_config",
    "load_split",
    "text_column",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fields")
    out = {}
    for name, body in (("data", "text,label\nhello there,0\n"), ("other", "text,label\nanother row,1\n")):
        (root / f"{name}.csv").write_text(body)
        (root / f"{name}.txt").write_text(body)
        out[name] = str(root / f"{name}.csv")
        out[f"{name}_txt"] = str(root / f"{name}.txt")
    tokenizer = llama_style_tokenizer(["a small corpus of words", "and some more words here"], 300)
    tokenizer.save(str(root / "tokenizer.json"))
    out["tokenizer"] = str(root / "tokenizer.json")
    return out


def _text_configs(field: str, new: Any, files: dict[str, str]) -> tuple[DataConfig, DataConfig]:
    base: dict[str, Any] = {"dataset": "csv", "data_files": files["data"]} if field in NEEDS_FILES else {}
    if field == "data_files":
        new = files["other"]
    return DataConfig(**base), DataConfig(**{**base, field: new})


def _lm_configs(field: str, new: Any, files: dict[str, str]) -> tuple[LMConfig, LMConfig]:
    base: dict[str, Any] = {}
    if field in NEEDS_FILES:
        base = {"dataset": "text", "data_files": files["data_txt"]}
    if field == "data_files":
        new = files["other_txt"]
    if field in ("tokenizer_file", "tokenizer"):
        base, new = {"eos_token": "</s>"}, files["tokenizer"]
    if field == "eos_token":
        base = {"bos_token": None}
    if field == "ray_address":
        base = {"engine": "ray"}
    if field in ("sources", "mixture_tolerance"):
        base = {"sources": {files["data_txt"]: 1.0}}
        new = {files["data_txt"]: 1.0, files["other_txt"]: 1.0} if field == "sources" else new
    return LMConfig(**base), LMConfig(**{**base, field: new})


PIPELINES = {
    "text": (DataConfig, TEXT_CHANGES, STEPS, DATA_STEPS, _text_configs),
    "lm": (LMConfig, LM_CHANGES, LM_STEPS, LM_DATA_STEPS, _lm_configs),
}


def _cases() -> Iterator[Any]:
    for pipeline, (config_cls, _, _, _, _) in PIPELINES.items():
        for field in dataclasses.fields(config_cls):
            yield pytest.param(pipeline, field.name, id=f"{pipeline}-{field.name}")


def _readers(registry: StepRegistry, order: tuple[str, ...], field: str, config_cls: type) -> set[str]:
    meta = {f.name: f.metadata for f in dataclasses.fields(config_cls)}[field]
    named = meta.get("through", field)  # input_hash changes the value data_files enters with
    return {s for s in order if named in registry[s].config}


def _outputs(ledger: StepLedger) -> dict[str, tuple[str | None, dict[str, str]]]:
    return {r.step: (r.output, dict(r.parts)) for r in ledger}


def _with_descendants(ledger: StepLedger, changed: set[str]) -> set[str]:
    out = set(changed)
    for record in ledger:  # in the order they ran: a consumer comes after what it consumes
        if set(record.inputs) & out:
            out.add(record.step)
    return out


@pytest.mark.parametrize(("pipeline", "field"), list(_cases()))
def test_a_changed_field_changes_exactly_the_steps_that_declare_it_and_their_consumers(
    pipeline, field, files
):
    config_cls, changes, registry, order, configs = PIPELINES[pipeline]
    assert field in changes, f"{config_cls.__name__}.{field} is new: give it a changed value in this test"
    if changes[field] is None:
        pytest.skip(
            "a changed order is another ledger, judged by the order rules (tests/unit/core/test_order.py)"
        )
    before, after = configs(field, changes[field], files)
    old, new = plan(order, registry, before), plan(order, registry, after)
    changed = {s for s, fp in _outputs(new).items() if fp != _outputs(old)[s]}
    readers = _readers(registry, order, field, config_cls)
    assert changed == _with_descendants(old, readers)
    if not config_cls.__dataclass_fields__[field].metadata.get("serving") and field != "order":
        assert readers, f"{field} shapes the data but no step declares it"


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_every_field_that_shapes_the_data_is_declared_by_a_step_or_marked_serving(pipeline):
    config_cls, _, registry, order, _ = PIPELINES[pipeline]
    declared = {name for step in order for name in registry[step].config}
    for field in dataclasses.fields(config_cls):
        meta = field.metadata
        if meta.get("serving") or "through" in meta:
            continue  # serves the data (SERVES), or enters through another field's value
        assert field.name in declared, (
            f"{config_cls.__name__}.{field.name} shapes the data (it is in the cache key) but no step declares "
            "it: add it to config=(...) of the steps that read it, or mark it SERVES"
        )
    assert declared <= {f.name for f in dataclasses.fields(config_cls)}


def test_a_declared_field_the_config_lacks_is_refused_naming_the_step():
    registry = StepRegistry()
    registry.add(dataclasses.replace(STEPS["load"], config=("lowercase", "no_such_field")))
    with pytest.raises(DataError, match="step 'load' declares the config field 'no_such_field'"):
        plan(("load",), registry, DataConfig())


# -- the declarations are complete: a real preparation that notes what each step reads ---------------
_NOTES: list[set[str]] = []  # the attributes read while a step runs (empty: nothing noted)
_DERIVED: dict[tuple[type, str], frozenset[str]] = {}


class _Noting:
    """Notes every attribute read on the instance (a cached value: the fields its function reads)."""

    noted_as = ""  # a context's attributes are noted as "ctx.<name>", apart from the config's

    def __getattribute__(self, name: str) -> Any:
        if _NOTES and not name.startswith("__") and name != "noted_as":
            _NOTES[-1].add(type(self).noted_as + name)
            cached = getattr(type(self), name, None)
            if isinstance(cached, functools.cached_property):
                _NOTES[-1].update(_derived(self, name, cached))
        return object.__getattribute__(self, name)


def _derived(config: Any, name: str, cached: functools.cached_property) -> frozenset[str]:
    key = (type(config), name)
    if key not in _DERIVED:
        with _noted() as seen:
            cached.func(config)  # the function, not the cache: what the value is made of
        _DERIVED[key] = frozenset(seen)
    return _DERIVED[key]


@contextlib.contextmanager
def _noted() -> Iterator[set[str]]:
    _NOTES.append(set())
    try:
        yield _NOTES[-1]
    finally:
        _NOTES.pop()


class NotingDataConfig(_Noting, DataConfig):
    pass


class NotingLMConfig(_Noting, LMConfig):
    pass


class NotingContext(_Noting, StepContext):
    noted_as = "ctx."


def _run_noting(registry: StepRegistry, order: tuple[str, ...], ctx: StepContext) -> dict[str, set[str]]:
    """Runs ``order`` in this process; returns what each step read of the config and of its context."""
    seen: dict[str, set[str]] = {}

    def noting(name: str, fn: Any) -> Any:
        def run(step_ctx: StepContext, state: DataState) -> Any:
            with _noted() as read:
                try:
                    return fn(step_ctx, state)
                finally:
                    seen[name] = set(read)

        return run

    wrapped = StepRegistry(registry.pipeline, state=registry.state)
    for name in order:
        wrapped.add(dataclasses.replace(registry[name], fn=noting(name, registry[name].fn)))
    run_steps(order, wrapped, ctx, initial_state(wrapped), StepLedger())
    return seen


def _check_reads(seen: dict[str, set[str]], registry: StepRegistry, config_cls: type) -> None:
    fields = {f.name: f.metadata for f in dataclasses.fields(config_cls)}
    shaping = {name for name, meta in fields.items() if not meta.get("serving")}
    for step, read in seen.items():
        spec = registry[step]
        # a field entering through another one's value (input_hash: data_files) is declared with it
        undeclared = {f for f in read & shaping if fields[f].get("through", f) not in spec.config}
        assert not undeclared, f"step '{step}' reads {sorted(undeclared)} without declaring them"
        if spec.output == "declared":
            assert "ctx.fingerprint" in read, f"step '{step}' does not make its output from ctx.fingerprint"


def test_the_text_steps_read_only_the_config_fields_they_declare(tmp_path):
    config = NotingDataConfig(demo_size=600, vocab_size=200, max_length=16, batch_size=8, num_proc=1)
    names = feature_names(config, DATA_STEPS)
    (tmp_path / "work").mkdir()
    ctx = NotingContext(config, feature_names=tuple(names), work=tmp_path / "work")
    seen = _run_noting(STEPS, DATA_STEPS, ctx)
    assert set(seen) == set(DATA_STEPS)
    _check_reads(seen, STEPS, DataConfig)


def test_the_lm_steps_read_only_the_config_fields_they_declare(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    for i in range(40):  # distinct documents: deduplication keeps them all
        (docs / f"doc{i:02d}.txt").write_text(" ".join(rng.choice(words) for _ in range(60)))
    config = NotingLMConfig(
        dataset="text",
        data_files=str(docs / "*.txt"),
        vocab_size=300,
        block_size=16,
        batch_size=2,
        num_proc=1,
    )
    (tmp_path / "work").mkdir()
    ctx = NotingContext(config, work=tmp_path / "work", engine=LocalEngine(1))
    seen = _run_noting(LM_STEPS, LM_DATA_STEPS, ctx)
    assert set(seen) == set(LM_DATA_STEPS)
    _check_reads(seen, LM_STEPS, LMConfig)

"""The contract both ordered DataModules share, tested once and parametrised over both.

``OrderedDataModule`` (text classification) and ``OrderedLMDataModule`` (causal LM) share their
base (:class:`~lightning_order.data.engine.datamodule.OrderedDataModuleBase`) and its config
(:class:`~lightning_order.data.engine.config.BaseDataConfig`): the same keywords, checked and
documented once; ``dims`` (and one attribute per dim), ``ledger``, ``tokenizer``,
``data_fingerprints()``, ``key_hashes()``, ``cache_path``; ``prepare_data`` that writes the cache
and assigns no state, ``setup`` that serves this rank's data; the loaders; a cache reused by a
second instance. Every training config under ``configs/`` is instantiated here too.

What differs lives beside each pipeline: tests/unit/data/text/test_datamodule.py and
tests/unit/data/lm/test_datamodule.py.
"""

from __future__ import annotations

import csv
import dataclasses
import inspect
import json
import random
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from helpers import CONFIGS

from lightning_order import (
    CacheWarning,
    DataError,
    OrderedDataModule,
    OrderedLMDataModule,
    OrderValidator,
    SymptomMonitor,
)
from lightning_order.cli import OrderCLI, spec_of_command
from lightning_order.data.engine.config import SERVING_FIELDS, BaseDataConfig, field_docs

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


@dataclass(frozen=True)
class Flavour:
    """One DataModule under test: its class, a small configuration, its batches and its own keywords."""

    datamodule: type
    small: dict[str, Any]
    batch_keys: frozenset[str]
    own_defaults: dict[str, Any]  # keywords of this pipeline only, with their defaults


FLAVOURS = [
    pytest.param(
        Flavour(
            OrderedDataModule,
            {"demo_size": 600, "vocab_size": 200, "max_length": 16},
            frozenset({"input_ids", "attention_mask", "features", "labels"}),
            {"label_column": "label", "max_length": 128, "tokenizer": "wordpiece", "demo_size": 20000},
        ),
        id="standard",
    ),
    pytest.param(
        Flavour(
            OrderedLMDataModule,
            {"max_documents": 200, "vocab_size": 300, "block_size": 16},
            frozenset({"input_ids", "labels"}),
            {"block_size": 128, "tokenizer_file": None, "pad_vocab_multiple": 64, "dedup_threshold": 0.8},
        ),
        id="lm",
    ),
]
DATAMODULES = [pytest.param(OrderedDataModule, id="standard"), pytest.param(OrderedLMDataModule, id="lm")]
#: The keywords of BaseDataConfig, which both DataModules take.
SHARED = [f.name for f in dataclasses.fields(BaseDataConfig)]
#: The shared keywords whose value shapes the prepared data, so it names another cache folder.
SHAPES_THE_DATA = {
    "dataset",
    "data_files",
    "text_column",
    "val_fraction",
    "seed",
    "vocab_size",
    "dataset_config",
    "load_split",
    "input_hash",
}
BATCH_SIZE = 8


def _make(flavour: Flavour, cache: Path, **kwargs: Any) -> Any:
    return flavour.datamodule(**{**flavour.small, "batch_size": BATCH_SIZE, **kwargs}, cache_dir=str(cache))


@pytest.fixture(scope="module", params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return request.param


@pytest.fixture(scope="module")
def ready(flavour: Flavour, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A DataModule of ``flavour``, prepared and set up, in its own cache folder (shared by this module's tests)."""
    dm = _make(flavour, tmp_path_factory.mktemp(f"cache-{flavour.datamodule.spec().name}"))
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _rows(loader: Any) -> int:
    return sum(len(batch["labels"]) for batch in loader)


def _scored(loader: Any) -> int:
    """Rows with a target (labels of -100 are none)."""
    return sum(
        int((batch["labels"].reshape(len(batch["labels"]), -1) != -100).any(dim=1).sum()) for batch in loader
    )


# -- the keywords ----------------------------------------------------------------------------------
def test_the_shared_keywords_are_the_base_configs_fields() -> None:
    assert SHARED == [
        "dataset",
        "data_files",
        "text_column",
        "val_fraction",
        "seed",
        "vocab_size",
        "batch_size",
        "num_workers",
        "num_proc",
        "cache_dir",
        "order",
        "enforce",
        "dataset_config",
        "load_split",
        "input_hash",
        "shuffle",
        "lock_timeout",
        "storage_options",
    ]  # declared in the order the LM DataModule takes them (its positional order is read from the fields)
    assert set(SERVING_FIELDS) <= set(SHARED) and not set(SERVING_FIELDS) & SHAPES_THE_DATA


@pytest.mark.parametrize("datamodule", DATAMODULES)
@pytest.mark.parametrize("keyword", SHARED)
def test_every_shared_keyword_is_a_documented_constructor_argument(datamodule: type, keyword: str) -> None:
    parameters = inspect.signature(datamodule).parameters
    assert keyword in parameters
    docs = field_docs(datamodule.spec().config_class())
    # The constructor's docstring (what --help shows) is made of the config fields' own docstrings.
    assert docs[keyword] and docs[keyword].split()[0] in datamodule.__doc__
    assert f"    {keyword}: " in datamodule.__doc__


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_every_argument_is_documented_once_where_it_is_declared(flavour: Flavour) -> None:
    datamodule = flavour.datamodule
    arguments = list(inspect.signature(datamodule).parameters)
    for name in arguments:
        assert f"    {name}: " in datamodule.__doc__, name
    own = inspect.signature(datamodule).parameters
    for name, default in flavour.own_defaults.items():  # each pipeline's own keywords, beside the shared
        assert name not in SHARED and own[name].default == default, name


def _value_files(tmp_path: Path) -> dict[str, Path]:
    files = {}
    for name, word in (("a", "first"), ("b", "second")):
        rows = [{"text": f"{word} document number {i}", "body": "x", "label": i % 2} for i in range(50)]
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("\n".join(json.dumps(r) for r in rows))
    return files


def _keyword_case(keyword: str, flavour: Flavour, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(base, change)``: constructor arguments, and a value of ``keyword`` other than base's."""
    files = _value_files(tmp_path)
    on_files = {"dataset": "json", "data_files": str(files["a"])}
    data_steps = list(flavour.datamodule(cache_dir=str(tmp_path)).order)
    cases: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "dataset": ({}, on_files),
        "data_files": (on_files, {"data_files": str(files["b"])}),
        "text_column": (on_files, {"text_column": "body"}),
        "val_fraction": ({}, {"val_fraction": 0.2}),
        "seed": ({}, {"seed": 3}),
        "vocab_size": ({}, {"vocab_size": flavour.small["vocab_size"] + 100}),
        "num_proc": ({}, {"num_proc": 3}),
        "dataset_config": (on_files, {"dataset_config": "default"}),
        "load_split": (on_files, {"load_split": "validation"}),
        "input_hash": (on_files, {"input_hash": "size_mtime"}),
        "batch_size": ({}, {"batch_size": 3}),
        "num_workers": ({}, {"num_workers": 1}),
        "shuffle": ({}, {"shuffle": False}),
        "cache_dir": ({}, {"cache_dir": str(tmp_path / "elsewhere")}),
        "order": ({}, {"order": data_steps}),  # the mandated order, asked for by name
        "enforce": ({}, {"enforce": False}),
        "lock_timeout": ({}, {"lock_timeout": 30.0}),
        "storage_options": ({}, {"storage_options": {"anon": True}}),
    }
    return cases[keyword]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("keyword", SHARED)
def test_a_shared_keyword_reaches_the_config_and_moves_the_cache_only_if_it_shapes_the_data(
    flavour: Flavour, keyword: str, tmp_path: Path
) -> None:
    base, change = _keyword_case(keyword, flavour, tmp_path)
    arguments = {**flavour.small, "cache_dir": str(tmp_path / "cache"), **base}
    before = flavour.datamodule(**arguments)
    after = flavour.datamodule(**{**arguments, **change})
    assert getattr(after.config, keyword) == change[keyword]
    if (
        keyword == "storage_options"
    ):  # credentials: never in hparams.yaml or a checkpoint (the environment's serve)
        assert keyword not in after.hparams
    else:
        assert (
            after.hparams[keyword] == change[keyword]
        )  # saved, so a checkpoint rebuilds the same DataModule
    assert (after.cache_key != before.cache_key) == (keyword in SHAPES_THE_DATA)
    if keyword == "order":
        assert after.order == before.order == tuple(change["order"])
    assert not (tmp_path / "cache").exists()  # construction prepares nothing


@pytest.mark.parametrize("datamodule", DATAMODULES)
@pytest.mark.parametrize(
    ("argument", "value", "words"),
    [
        ("seed", 1.9, "seed must be an int, got 1.9"),
        ("seed", "abc", "seed must be an int"),
        ("seed", None, "seed must be an int"),
        ("shuffle", "false", "shuffle must be true or false"),
        ("enforce", 0, "enforce must be true or false"),
        ("batch_size", 0, "batch_size must be an int >= 1"),
        ("num_workers", -1, "num_workers must be an int >= 0"),
        ("data_files", 5, "data_files must be a path"),
        ("val_fraction", 2, "val_fraction must be in (0, 1)"),
    ],
)
def test_the_shared_arguments_are_checked_once_for_both_datamodules(
    datamodule: type, argument: str, value: object, words: str, tmp_path: Path
) -> None:
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(")", r"\)")):
        datamodule(**{argument: value}, cache_dir=str(tmp_path))
    assert not list(tmp_path.iterdir())  # refused before any work


@pytest.mark.parametrize("datamodule", DATAMODULES)
def test_serving_arguments_do_not_move_the_cache_key(datamodule: type, tmp_path: Path) -> None:
    base = datamodule(cache_dir=str(tmp_path))
    served = datamodule(cache_dir=str(tmp_path / "other"), batch_size=7, num_workers=1, shuffle=False)
    assert base.cache_key == served.cache_key
    assert {"batch_size", "num_workers", "shuffle", "cache_dir"} <= set(SERVING_FIELDS)
    assert datamodule(cache_dir=str(tmp_path), seed=1).cache_key != base.cache_key


# -- prepare_data and the cache --------------------------------------------------------------------
def test_prepare_data_writes_the_cache_and_assigns_no_state(flavour: Flavour, tmp_path: Path) -> None:
    dm = _make(flavour, tmp_path)
    assert dm.cache_root == tmp_path and dm.cache_path == tmp_path / dm.cache_key
    assert not dm.cache_path.exists()
    dm.prepare_data()
    assert (dm.cache_path / "manifest.json").is_file() and (dm.cache_path / "tokenizer.json").is_file()
    # Rank discipline: prepare_data assigns nothing a rank serves.
    assert dm.shard_info == {}
    assert dm.key_hashes("train") is None and dm.key_hashes("val") is None
    dm.prepare_data()  # a complete cache is reused at once
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [dm.cache_key]


def test_a_second_instance_reuses_the_cache(flavour: Flavour, tmp_path: Path) -> None:
    first = _make(flavour, tmp_path)
    first.setup("fit")
    manifest = first.cache_path / "manifest.json"
    written = manifest.stat().st_mtime_ns
    listing = sorted(p.name for p in tmp_path.iterdir())
    second = _make(flavour, tmp_path, batch_size=3, num_workers=0)  # serving arguments differ
    assert second.cache_path == first.cache_path
    second.prepare_data()
    second.setup("fit")
    assert manifest.stat().st_mtime_ns == written and sorted(p.name for p in tmp_path.iterdir()) == listing
    assert second.dims == first.dims
    assert second.data_fingerprints() == first.data_fingerprints()

    def prepared(dm: Any) -> list[str]:
        return [record.output for record in dm.ledger.records if record.step != "shard"]

    assert prepared(second) == prepared(first)
    # What a rank reads is its part of every global batch: the shard records the batch size.
    assert second.ledger.latest("shard").params["batch_size"] == 3
    assert np.array_equal(second.key_hashes("val"), first.key_hashes("val"))
    # One rank's first epoch is the head of the same global order, cut at another whole batch.
    a, b = first.key_hashes("train"), second.key_hashes("train")
    assert np.array_equal(a[: min(len(a), len(b))], b[: min(len(a), len(b))])
    assert len(next(iter(second.train_dataloader()))["labels"]) == 3


def test_reading_dims_prepares_the_data(flavour: Flavour, tmp_path: Path) -> None:
    """A model is built from the data right after construction: ``Model(**dm.dims)``."""
    dm = _make(flavour, tmp_path)
    dims = dm.dims
    assert (dm.cache_path / "manifest.json").is_file()
    model = dm.spec().model_class()(**dims)
    for dim in dm.spec().dims:
        assert model.hparams[dim] == dims[dim]


# -- what the model and the checks read ------------------------------------------------------------
def test_dims_ledger_and_tokenizer(ready: Any) -> None:
    spec = ready.spec()
    dims = ready.dims
    assert set(dims) == set(spec.dims)
    for dim in spec.dims:  # one read-only attribute per dim
        assert getattr(ready, dim) == dims[dim]
    assert dims["vocab_size"] == ready.tokenizer.get_vocab_size() <= ready.config.vocab_size
    assert ready.tokenizer is ready.tokenizer  # read from the cache once
    data_steps = [s for s in spec.pipeline.order() if s in ready.order]
    assert ready.ledger.steps() == data_steps  # after setup: shard too, on this rank
    assert ready.ledger.latest("shard").rank == 0
    assert spec.pipeline.check(ready.ledger) == []


def test_data_fingerprints(ready: Any) -> None:
    fps = ready.data_fingerprints()
    assert {"manifest", "split", "vocab"} <= set(fps)
    assert all(isinstance(v, str) and len(v) == 32 for v in fps.values())
    assert fps["split"] == ready.ledger.latest("split").output
    assert ready.data_fingerprints() == fps


def test_setup_serves_this_ranks_data(ready: Any) -> None:
    train, val = ready.key_hashes("train"), ready.key_hashes("val")
    assert train.dtype == val.dtype == np.int64 and len(train) > 0 and len(val) > 0
    assert not set(train.tolist()) & set(val.tolist())  # no example on both sides of the split
    assert ready.key_hashes("test") is None
    info = ready.shard_info
    assert {k: info[k] for k in ("rank", "world_size")} == {"rank": 0, "world_size": 1}
    # The loader reads the whole split by index: every whole batch, the rest dropped (and recorded).
    whole = len(ready.train_dataloader().dataset)
    assert (info["length"], info["dropped"]) == (whole - whole % BATCH_SIZE, whole % BATCH_SIZE)


def test_the_loaders_serve_the_batch_contract(ready: Any, flavour: Flavour) -> None:
    batch = next(iter(ready.train_dataloader()))
    assert set(batch) == flavour.batch_keys
    assert len(batch["labels"]) == BATCH_SIZE
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
    assert int(batch["input_ids"].max()) < ready.dims["vocab_size"]
    # These DataModules split train/validation only: test and predict serve the validation split.
    val_rows = _rows(ready.val_dataloader())
    assert val_rows > 0 and _rows(ready.test_dataloader()) == _rows(ready.predict_dataloader()) == val_rows
    assert _rows(ready.train_dataloader()) == ready.shard_info["length"]


def test_the_train_order_is_seeded(flavour: Flavour, ready: Any) -> None:
    def first_ids(dm: Any) -> list:
        return next(iter(dm.train_dataloader()))["input_ids"].tolist()

    again = _make(flavour, ready.cache_root)
    again.setup("fit")
    assert first_ids(again) == first_ids(ready)
    unshuffled = _make(flavour, ready.cache_root, shuffle=False)
    unshuffled.setup("fit")
    served = [row for batch in unshuffled.train_dataloader() for row in batch["input_ids"].tolist()]
    assert first_ids(unshuffled) == served[:BATCH_SIZE] and first_ids(ready) != served[:BATCH_SIZE]


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_gets_an_equal_shard_of_one_prepared_cache(
    ready: Any, flavour: Flavour, world: int
) -> None:
    total = ready.shard_info["length"] + ready.shard_info["dropped"]  # the whole train split
    lengths, parts, val_rows = set(), [], []
    whole = _make(flavour, ready.cache_root, batch_size=world * BATCH_SIZE)  # one rank, the same global batch
    whole.setup("fit")
    for rank in range(world):
        dm = _make(flavour, ready.cache_root)
        dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)  # what a DDP rank sees
        dm.setup("fit")
        assert dm.cache_path == ready.cache_path
        info = dm.shard_info
        assert (info["rank"], info["world_size"]) == (rank, world)
        lengths.add(info["length"])
        assert dm.ledger.latest("shard").rank == rank
        # rows read, and rows scored (an LM share's padding block has no target: every label -100)
        val_rows.append((_rows(dm.val_dataloader()), _scored(dm.val_dataloader())))
        assert dm.data_fingerprints() == ready.data_fingerprints()
        parts.append([batch["input_ids"] for batch in dm.train_dataloader()])
    # Every rank reads BATCH_SIZE samples of each global batch of world × BATCH_SIZE: the ranks'
    # batches side by side are the batches one rank reads with the whole global batch.
    # The classification DataModule gives every rank the whole validation split; the LM one a share (#35).
    whole_val = _rows(ready.val_dataloader())
    if flavour.datamodule is OrderedLMDataModule:
        read, scored = zip(*val_rows)
        assert sum(scored) == whole_val and max(scored) - min(scored) <= 1 and len(set(read)) == 1
    else:
        assert val_rows == [(whole_val, whole_val)] * world
    (length,) = lengths
    served = total // (world * BATCH_SIZE) * world * BATCH_SIZE
    assert length == served // world and info["dropped"] == total - served
    together = [torch.cat(step) for step in zip(*parts)]
    alone = [batch["input_ids"] for batch in whole.train_dataloader()]
    assert len(together) == len(alone) and all(torch.equal(a, b) for a, b in zip(together, alone))


def test_a_mesh_shards_by_the_data_parallel_rank_so_a_tensor_parallel_group_reads_one_share(
    ready: Any, flavour: Flavour
) -> None:
    """dp 2 × tp 2 (ModelParallelStrategy's distributed_sampler_kwargs): ranks 0, 1 read share 0, ranks 2, 3 share 1."""
    batches, shares = [], []
    for rank in range(4):
        dm = _make(flavour, ready.cache_root)
        kwargs = {"num_replicas": 2, "rank": rank // 2}  # what ModelParallelStrategy states
        dm.trainer = SimpleNamespace(
            world_size=4, global_rank=rank, strategy=SimpleNamespace(distributed_sampler_kwargs=kwargs)
        )
        dm.setup("fit")
        info = dm.shard_info
        assert (info["rank"], info["world_size"], info["start"]) == (rank // 2, 2, rank // 2 * BATCH_SIZE)
        shard = dm.ledger.latest("shard")
        assert shard.rank == rank and shard.stats["world_size"] == 2
        assert shard.params["global_batch"] == 2 * BATCH_SIZE
        shares.append(shard.output)
        batches.append([batch["input_ids"] for batch in dm.train_dataloader()])
    assert shares[0] == shares[1] != shares[2] == shares[3]
    same = [all(torch.equal(a, b) for a, b in zip(batches[i], batches[i + 1])) for i in (0, 2)]
    assert same == [True, True] and not torch.equal(batches[0][0], batches[2][0])


# -- every config under configs/ -------------------------------------------------------------------
SMALL_ARGS = {
    "standard": ["--data.demo_size=200", "--data.vocab_size=200", "--data.max_length=32"],
    "lm": ["--data.max_documents=200", "--data.vocab_size=300", "--data.block_size=16"],
}


def _write_csv(path: Path, rows: int = 200) -> Path:
    rng = random.Random(0)
    words = {0: "good great fine nice happy".split(), 1: "bad awful poor sad angry".split()}
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in range(rows):
            label = i % 2
            text = " ".join(rng.choices(words[label], k=rng.randint(3, 12))) + rng.choice([".", "!", ""])
            writer.writerow([f"{text} row{i}", label])
    return path


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_parses_and_instantiates(config: Path, tmp_path: Path) -> None:
    spec = spec_of_command(["--config", str(config)])
    args = ["--config", str(config), *SMALL_ARGS[spec.name]]
    args += ["--data.cache_dir", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path)]
    settings = yaml.safe_load(config.read_text())
    if settings["data"].get("dataset") == "csv":
        args += ["--data.data_files", str(_write_csv(tmp_path / "train.csv"))]
    cli = OrderCLI(args=args, run=False, pipeline=spec)
    assert type(cli.datamodule) is spec.datamodule_class()
    assert type(cli.model) is spec.model_class()
    for dim in spec.dims:  # linked from the data into the model
        assert cli.model.hparams[dim] == cli.datamodule.dims[dim]
    assert any(isinstance(cb, OrderValidator) for cb in cli.trainer.callbacks)
    assert any(isinstance(cb, SymptomMonitor) for cb in cli.trainer.callbacks)
    if settings["trainer"].get("strategy") == "ddp":
        assert cli.trainer.num_devices == settings["trainer"]["devices"] == 2


def _trained_ids(dm: Any) -> torch.Tensor:
    return torch.cat([batch["input_ids"].reshape(-1) for batch in dm.train_dataloader()])


def _damage(dm: Any) -> Path:
    """Overwrites 64 bytes in the middle of the largest train data file, in place (same size)."""
    target = max(
        (p for p in (dm.cache_path / "train").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    with target.open("r+b") as handle:
        handle.seek(target.stat().st_size // 2)
        handle.write(b"\x7f" * 64)
    return target


def test_a_cache_rebuilt_under_a_live_datamodule_is_the_one_it_serves(
    flavour: Flavour, tmp_path: Path
) -> None:
    """The same DataModule fitted twice, a cache file damaged in between (issue #32).

    The second ``prepare_data`` warns and rebuilds the folder; ``setup`` must then read the rebuilt
    files, never keep the memory map of the damaged ones it had.
    """
    dm = _make(flavour, tmp_path, shuffle=False)
    dm.prepare_data()
    dm.setup("fit")
    intact = _trained_ids(dm)
    damaged = _damage(dm)
    assert not torch.equal(_trained_ids(dm), intact)  # the old memory map sees the damage
    with pytest.warns(CacheWarning, match=f"damaged.*{damaged.name}.*preparing it anew"):
        dm.prepare_data()
    dm.setup("fit")
    assert torch.equal(_trained_ids(dm), intact)
    assert dm.ledger.latest("shard") is not None and dm.shard_info["length"] > 0

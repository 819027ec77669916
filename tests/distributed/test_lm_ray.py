"""``OrderedLMDataModule(engine="ray")``: the same data and proofs as on one machine (issue #24).

Ray is started locally by the tests (its own short temp folder each, shut down after): one node
with two CPUs, and a simulated cluster of two nodes (``ray.cluster_utils.Cluster``). The engine
attaches to the Ray the test started and leaves it running.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from lightning_order import DataError, OrderedLMDataModule  # noqa: E402
from lightning_order.data.engine import ray_engine  # noqa: E402
from lightning_order.data.engine.ray_engine import RayEngine  # noqa: E402
from lightning_order.data.lm import prepare, tasks  # noqa: E402
from lightning_order.data.lm.artefacts import read_blocks  # noqa: E402

pytestmark = pytest.mark.slow
SMALL = {"max_documents": 500, "vocab_size": 400, "block_size": 32, "num_partitions": 4}


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for this module's tests (started after the two-node test, which needs none running)."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    yield
    ray.shutdown()


def _same(a: OrderedLMDataModule, b: OrderedLMDataModule) -> None:
    assert a.data_fingerprints() == b.data_fingerprints()
    for split in ("train", "val"):
        assert np.array_equal(
            np.asarray(read_blocks(a.cache_path)[split]), np.asarray(read_blocks(b.cache_path)[split])
        )


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory) -> OrderedLMDataModule:
    dm = OrderedLMDataModule(cache_dir=str(tmp_path_factory.mktemp("local")), num_proc=1, **SMALL)
    dm.prepare_data()
    return dm


@pytest.fixture(scope="module")
def json_corpus(tmp_path_factory) -> Path:
    """The built-in corpus as JSON lines: read by the engine's workers, in ranges (issue #35 item 1)."""
    import json

    from lightning_order.data.lm.corpus import stdlib_corpus

    path = tmp_path_factory.mktemp("json") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in stdlib_corpus(SMALL["max_documents"])))
    return path


@pytest.fixture(scope="module")
def json_reference(tmp_path_factory, json_corpus) -> OrderedLMDataModule:
    dm = _json(tmp_path_factory.mktemp("json-local"), json_corpus, num_proc=1)
    dm.prepare_data()
    return dm


def _json(cache: Path, corpus: Path, **kwargs) -> OrderedLMDataModule:
    small = {k: v for k, v in SMALL.items() if k != "max_documents"}  # max_documents keeps datasets' reader
    return OrderedLMDataModule("json", data_files=str(corpus), cache_dir=str(cache), **small, **kwargs)


def _split_file(monkeypatch, corpus: Path) -> int:
    """Work items of 20 kB: the one input file is read in many ranges; how many."""
    from lightning_order.data.lm import file_ranges

    monkeypatch.setattr(file_ranges, "RANGE_BYTES", 20_000)
    return -(-corpus.stat().st_size // 20_000)


def test_a_simulated_two_node_cluster_prepares_the_same_data(
    tmp_path, local_reference, json_corpus, json_reference, monkeypatch
):
    assert not ray.is_initialized()  # first in the module: the engine must join this cluster
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    # Ray's Cluster writes its address to /tmp/ray/ray_current_cluster whatever the temp folder,
    # without creating /tmp/ray: on a fresh machine that folder does not exist yet.
    os.makedirs("/tmp/ray", exist_ok=True)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": temp, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    try:
        dm = OrderedLMDataModule(cache_dir=str(tmp_path), engine="ray", ray_address=cluster.address, **SMALL)
        dm.prepare_data()
        assert dm.ledger.latest("load").stats["workers"] == 2 and len(cluster.list_all_nodes()) == 2
        _same(dm, local_reference)
        assert _split_file(monkeypatch, json_corpus) > 10
        split = _json(tmp_path / "json", json_corpus, engine="ray", ray_address=cluster.address)
        split.prepare_data()
        _same(split, json_reference)
    finally:
        ray.shutdown()
        cluster.shutdown()
        # A stale address file makes a later bare ray.init() try to join this dead cluster.
        Path("/tmp/ray/ray_current_cluster").unlink(missing_ok=True)


def test_ray_prepares_the_same_data_as_local(
    tmp_path, local_ray, local_reference, json_corpus, json_reference, monkeypatch
):
    dm = OrderedLMDataModule(cache_dir=str(tmp_path), engine="ray", **SMALL)
    dm.prepare_data()
    assert dm.ledger.latest("load").stats["engine"] == "ray"
    _same(dm, local_reference)
    assert _split_file(monkeypatch, json_corpus) > 10
    split = _json(tmp_path / "json", json_corpus, engine="ray")
    split.prepare_data()
    _same(split, json_reference)
    assert ray.is_initialized()  # the test's Ray is left running


def _kill_merge(marker: str, always: bool):
    """A merge task that kills its own worker process (once, or every time)."""

    def merge(item):
        if always or not os.path.exists(marker):
            Path(marker).touch()
            os._exit(1)
        return tasks.merge_partition(item)

    return merge


class KillingEngine(RayEngine):
    """The Ray engine, with the worker of the first merge task killed."""

    def __init__(self, marker: str, always: bool, **kwargs):
        super().__init__(**kwargs)
        self.killer = _kill_merge(marker, always)

    def map(self, fn, items, weight=None, desc=""):
        return super().map(self.killer if fn is tasks.merge_partition else fn, items, weight, desc)


@pytest.mark.parametrize("always", [False, True], ids=["killed-once-retried", "killed-every-time"])
def test_a_killed_worker_never_leaves_a_cache_that_is_trusted(
    tmp_path, local_ray, local_reference, monkeypatch, always
):
    marker = str(tmp_path / "killed")
    monkeypatch.setattr(
        prepare, "make_engine", lambda name, num_proc, address=None: KillingEngine(marker, always)
    )
    # One retry is enough to show a retry; every worker death costs a worker's start-up.
    monkeypatch.setattr(ray_engine, "MAX_RETRIES", 1)
    dm = OrderedLMDataModule(cache_dir=str(tmp_path / "cache"), engine="ray", **SMALL)
    if always:
        with pytest.raises(DataError, match="was lost") as info:
            dm.prepare_data()
        assert "\n" not in str(info.value)
        assert not dm.cache_path.exists() and not list(dm.cache_root.glob(".tmp-*"))
        monkeypatch.undo()
        dm = OrderedLMDataModule(cache_dir=str(tmp_path / "cache"), engine="ray", **SMALL)
        dm.prepare_data()  # the rerun, on a healthy Ray
    else:
        dm.prepare_data()
    assert os.path.exists(marker)  # a worker did die
    _same(dm, local_reference)


def test_a_ray_task_runs_its_item_as_a_local_worker_does(local_ray):
    """Each task goes through the workers' wrapper: the tokenizer on one thread (Ray gives a task
    one CPU) and what the item freed handed back to the system after it."""
    engine = RayEngine()
    stacks = engine.map(traceback.format_stack, [None, None])  # the task's own call stack, in the worker
    for stack in stacks:
        assert any("in run_in_worker" in frame for frame in stack)
        assert any("in run_released" in frame for frame in stack)
    assert engine.map(os.getenv, ["TOKENIZERS_PARALLELISM"]) == ["false"]
    engine.close()
    assert ray.is_initialized()  # the test's Ray is left running


def test_an_error_inside_a_task_is_raised_as_itself(tmp_path, local_ray):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "   "}\n{"text": "\\n"}\n')
    dm = OrderedLMDataModule("json", data_files=str(path), cache_dir=str(tmp_path / "c"), engine="ray")
    with pytest.raises(DataError, match="no document is left after cleaning") as info:
        dm.prepare_data()
    assert info.value.step == "clean"


_CASES = {
    "correct": ({}, False, []),
    "vocab-before-clean": (
        {"order": ["load", "build_vocab", "clean", "dedup", "split", "encode", "pack", "shard"]},
        False,
        ["vocab-before-clean"],
    ),
    "dedup-after-split": (
        {"order": ["load", "clean", "split", "dedup", "build_vocab", "encode", "pack", "shard"]},
        False,
        ["dedup-after-split"],
    ),
    "pack-without-eos": ({"eos": False}, False, ["pack-without-eos"]),
    "vocab-changed-after-init": ({}, True, ["vocab-changed-after-init"]),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_the_validator_on_ray_prepared_data(tmp_path, local_ray, case):
    from helpers import quiet_trainer

    from lightning_order import OrderedCausalLM, OrderError, OrderValidator

    kwargs, pad_after_init, rules = _CASES[case]
    dm = OrderedLMDataModule(
        cache_dir=str(tmp_path / "cache"), engine="ray", enforce=False, batch_size=8, **SMALL, **kwargs
    )
    model = OrderedCausalLM(**dm.dims, n_layer=1, n_head=2, n_embd=32)
    if pad_after_init:
        dm.tokenizer.add_special_tokens(["<pad>"])  # after the model was built: the classic mistake
    validator = OrderValidator()
    trainer = quiet_trainer(tmp_path, [validator], max_steps=2, limit_val_batches=0)
    if not rules:
        trainer.fit(model, dm)
        assert validator.violations == [] and trainer.global_step == 2
        assert dm.ledger.latest("load").stats["engine"] == "ray"
        return
    with pytest.raises(OrderError) as info:
        trainer.fit(model, dm)
    assert set(rules) <= set(info.value.rules) and trainer.global_step == 0


def test_the_lm_main_job_runs_end_to_end_on_ray(tmp_path, local_ray, capsys):
    """``lightning-order fit --config configs/lm-demo.yaml --data.engine ray``, on a small corpus."""
    from helpers import ROOT

    from lightning_order.cli import main

    config = str(ROOT / "configs" / "lm-demo.yaml")
    args = [
        "--data.engine",
        "ray",
        "--data.max_documents=200",
        "--data.vocab_size=300",
        "--data.block_size=16",
    ]
    args += ["--data.cache_dir", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path)]
    args += ["--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1"]
    assert main(["fit", "--config", config, *args]) == 0
    out = capsys.readouterr().out
    assert "✓ the order is correct" in out and "validation perplexity:" in out
    ledger = OrderedLMDataModule(
        cache_dir=str(tmp_path / "cache"), max_documents=200, vocab_size=300, block_size=16, engine="ray"
    ).ledger
    assert ledger.latest("load").stats["engine"] == "ray"

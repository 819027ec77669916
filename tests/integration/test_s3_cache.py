"""#46 items 2-4: the prepared LM cache published to an S3 API server, and training from it; the
classification cache published there too.

moto's server on 127.0.0.1 (``tests/s3_server.py``) stands for S3; the DataModules reach it as a
user does, through the AWS variables the fixtures set. The publishing protocol's faults (the
server stopped mid-publish, two preparers, a stale lock) are tested on a staged folder in
tests/unit/storage/test_remote_cache.py, the server stopped while a work item uploads here; two
DDP ranks (and their mid-epoch resume) in tests/distributed/test_s3_cache_ddp.py; a Ray
preparation publishing to the server in tests/distributed/test_s3_inputs_ray.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
from helpers import quiet_trainer
from pytorch_lightning.callbacks import ModelCheckpoint
from resumes import BatchHashes, model
from s3_server import make_bucket, s3_env

from lightning_order import OrderedDataModule, OrderedLMDataModule, OrderValidator
from lightning_order.data.engine import shard_cache
from lightning_order.errors import DataError

SMALL = {"vocab_size": 300, "block_size": 16, "num_proc": 1, "max_documents": 200, "batch_size": 4}


def _epoch(dm: OrderedLMDataModule, epoch: int = 0) -> list[dict[str, torch.Tensor]]:
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)
    return list(loader)


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            assert torch.equal(x[key], y[key]), key


@pytest.fixture(scope="module")
def published(s3_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``cache_dir`` on the server, the SMALL corpus published there once for the module's readers."""
    publisher = tmp_path_factory.mktemp("publisher-cache")
    with pytest.MonkeyPatch.context() as patch:
        s3_env(patch, s3_server)
        patch.setenv("LIGHTNING_ORDER_CACHE", str(publisher))
        url = f"s3://{make_bucket(s3_server)}/prepared"
        dm = OrderedLMDataModule(cache_dir=url, **SMALL)
        dm.prepare_data()
        fs = fsspec.filesystem("s3")
        # Published: the manifest on the store, the lock released, the staged folder deleted.
        assert fs.exists(f"{url}/{dm.cache_key}/manifest.json") and not fs.exists(
            f"{url}/{dm.cache_key}.lock"
        )
        assert not [
            p for p in (publisher / "staging").rglob("*") if p.is_file() and not p.name.endswith(".lock")
        ]
    yield url


@pytest.fixture
def reader(published: str, s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The published ``cache_dir``, with the AWS variables set for this test."""
    s3_env(monkeypatch, s3_server)
    return published


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh user cache (mirror, staging, the bounded shard cache) for this test alone."""
    root = tmp_path / "user-cache"
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(root))
    return root


def test_prepared_on_the_server_reads_back_the_local_cache(reader, own_cache, tmp_path, monkeypatch):
    """Same key, same blocks, same first-epoch batches as a local cache; nothing named ``s3:`` locally."""
    monkeypatch.chdir(tmp_path)
    url = reader
    local = OrderedLMDataModule(cache_dir=str(tmp_path / "local"), **SMALL)
    remote = OrderedLMDataModule(cache_dir=url, **SMALL)
    assert remote.cache_key == local.cache_key
    for dm in (local, remote):
        dm.prepare_data()
        dm.setup("fit")
    fs = fsspec.filesystem("s3")
    assert fs.exists(f"{url}/{remote.cache_key}/manifest.json")
    assert not list(tmp_path.rglob("s3:*"))
    np.testing.assert_array_equal(remote.blocks("val"), local.blocks("val"))
    _same(_epoch(remote), _epoch(local))
    assert remote.dims == local.dims and remote.data_fingerprints() == local.data_fingerprints()
    assert list(remote.documents("train"))[:5] == list(local.documents("train"))[:5]
    assert not (own_cache / "staging").exists()  # published by another process: nothing prepared here


def test_fetched_bytes_in_one_epoch_and_a_second_epoch_from_the_local_cache(reader, own_cache):
    """An epoch fetches about what it serves (≤ 1.1); a second, with the split in the local cache, fetches nothing."""
    dm = OrderedLMDataModule(cache_dir=reader, **SMALL)
    dm.setup("fit")
    before = shard_cache.fetched_bytes()
    first = _epoch(dm, 0)
    fetched = shard_cache.fetched_bytes() - before
    served = sum(batch["input_ids"].shape[0] for batch in first) * (dm.dims["block_size"] + 1) * 4
    assert 0 < fetched <= 1.1 * served, (fetched, served)
    before = shard_cache.fetched_bytes()
    assert _epoch(dm, 1)
    second = shard_cache.fetched_bytes() - before
    print(
        f"1 rank: fetched {fetched} bytes for {served} served: {fetched / served:.3f}; second epoch fetched {second}"
    )
    assert second == 0


def test_the_local_cache_stays_within_its_limit(reader, own_cache, monkeypatch):
    """A limit below the split: the least recently used shards are evicted, the batches unchanged."""
    url = reader
    full = OrderedLMDataModule(cache_dir=url, **{**SMALL, "shuffle": False})
    full.setup("fit")
    expected = _epoch(full)
    shards = own_cache / "shards"
    sizes = sorted(p.stat().st_size for p in shards.iterdir() if p.is_file())
    limit = sum(sizes[-2:])  # room for the two largest shards, not for all of them
    assert len(sizes) > 2
    for p in shards.iterdir():
        if p.is_file():
            p.unlink()
    monkeypatch.setenv(shard_cache.SHARD_CACHE_ENV, str(limit))
    bounded = OrderedLMDataModule(cache_dir=url, **{**SMALL, "shuffle": False})
    bounded.setup("fit")
    _same(_epoch(bounded), expected)
    assert sum(p.stat().st_size for p in shards.iterdir() if p.is_file()) <= limit


@pytest.mark.parametrize("name", ["train/blocks", "tokenizer.json"])
def test_an_object_changed_after_publishing_is_refused(reader, own_cache, name):
    """A shard (read when a batch needs it) or a small file (read at setup) whose bytes changed on the store."""
    url = reader
    dm = OrderedLMDataModule(cache_dir=url, **SMALL)
    fs = fsspec.filesystem("s3")
    folder = f"{url}/{dm.cache_key}"
    target = (
        sorted(p for p in fs.find(f"{folder}/train/blocks") if p.endswith(".npy"))[0]
        if name == "train/blocks"
        else f"{folder}/{name}"
    )
    original = fs.cat_file(target)
    data = bytearray(original)
    data[-1] ^= 0xFF  # the same size: only the hash tells
    fs.pipe_file(target, bytes(data))
    relative = target.split(f"{dm.cache_key}/", 1)[1]
    try:
        with pytest.raises(DataError, match=f"{relative}.*changed after it was published") as caught:
            dm.setup("fit")
            for _ in dm.train_dataloader():
                pass
    finally:
        fs.pipe_file(target, original)  # the module's other readers read the published bytes
    assert "\n" not in str(caught.value)


def test_classification_publishes_to_the_server_and_reads_back_the_local_cache(
    s3_bucket, own_cache, tmp_path, monkeypatch
):
    """``OrderedDataModule(cache_dir="s3://...")``: published with the manifest last, read on another
    machine (a fresh user cache) with the local cache's key, files, dims and first-epoch batches."""
    monkeypatch.chdir(tmp_path)
    url = f"s3://{s3_bucket}/prepared"
    small = {"demo_size": 300, "vocab_size": 120, "max_length": 12, "batch_size": 16}
    local = OrderedDataModule(cache_dir=str(tmp_path / "local"), **small)
    publisher = OrderedDataModule(cache_dir=url, **small)
    assert publisher.cache_key == local.cache_key
    local.prepare_data()
    publisher.prepare_data()
    fs = fsspec.filesystem("s3")
    folder = f"{url}/{publisher.cache_key}"
    assert fs.exists(f"{folder}/manifest.json") and not fs.exists(f"{folder}.lock")
    published = json.loads(fs.cat_file(f"{folder}/manifest.json"))["info"]["files"]
    # Same files, same per-file xxh3; but datasets' own state.json, whose "_fingerprint" datasets
    # draws at random for a transform it cannot hash: it differs between two local preparations too.
    assert published.keys() == local.ledger.info["files"].keys()
    same = {n: r for n, r in published.items() if not n.endswith("/state.json")}
    assert same == {n: r for n, r in local.ledger.info["files"].items() if n in same} and len(same) >= 6
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(tmp_path / "another-machine"))
    reader = OrderedDataModule(cache_dir=url, **small)
    for dm in (local, reader):
        dm.setup("fit")
    assert reader.dims == local.dims and reader.data_fingerprints() == local.data_fingerprints()
    _same(_epoch(reader), _epoch(local))
    validator = OrderValidator()  # its proofs read the mirror's manifest and statistics
    quiet_trainer(tmp_path, [validator], max_steps=2, limit_val_batches=1).fit(
        model("standard", reader), reader
    )
    assert validator.violations == []
    assert not (tmp_path / "another-machine" / "staging").exists()  # read, never prepared there
    assert not list(tmp_path.rglob("s3:*"))


def test_the_server_stopped_while_a_work_item_uploads_then_a_rerun_completes(
    own_s3_server, own_cache, monkeypatch
):
    """A work item uploads the documents it placed: the server gone then is one line naming the
    object, nothing is committed, and a rerun (the server back) publishes the whole cache."""
    from lightning_order.data.engine import remote_cache

    fast = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}
    url = f"s3://{make_bucket(own_s3_server.endpoint_url)}/prepared"
    real, failed = remote_cache.upload_file, []

    def stop_at_the_documents(fs, local, target) -> None:
        if "/documents/" in target and not failed:  # a work item's upload (the driver's come after)
            failed.append(target)
            own_s3_server.stop()
        real(fs, local, target)

    monkeypatch.setattr(remote_cache, "upload_file", stop_at_the_documents)
    dm = OrderedLMDataModule(cache_dir=url, storage_options=fast, **SMALL)
    with pytest.raises(
        DataError, match=r"could not write .*/documents/part-00000\.arrow on object storage"
    ) as caught:
        dm.prepare_data()
    assert "\n" not in str(caught.value) and failed
    own_s3_server.start()
    fs = fsspec.filesystem("s3", **fast)
    fs.invalidate_cache()
    assert not fs.exists(f"{url}/{dm.cache_key}/manifest.json")  # nothing committed
    OrderedLMDataModule(cache_dir=url, storage_options=fast, lock_timeout=10, **SMALL).prepare_data()
    assert dm.remote_cache is not None and dm.remote_cache.problems() == []
    assert not fs.exists(dm.remote_cache.lock_url)


@pytest.mark.slow  # two Trainer runs with loader workers: 7 s
@pytest.mark.filterwarnings("error::lightning_order.errors.OutputWarning")  # tokenizer/ not written
def test_a_run_from_the_server_resumes_exactly_with_its_checkpoints_there(
    reader, own_cache, tmp_path, monkeypatch
):
    """Cache and checkpoints on the server: a run resumed mid-epoch from an ``s3://`` checkpoint reads
    the uninterrupted run's batches; the tokenizer folder is beside the checkpoints; no local ``s3:``."""
    monkeypatch.chdir(tmp_path)
    runs = f"{reader.rsplit('/', 1)[0]}/runs"
    train = {"max_steps": 6, "limit_val_batches": 1, "enable_checkpointing": True}
    # Two loader workers: each fetches through its own connection into the machine's local cache.
    loader = {**SMALL, "batch_size": 8, "num_workers": 2}
    dm, hashes = OrderedLMDataModule(cache_dir=reader, **loader), BatchHashes()
    every = ModelCheckpoint(dirpath=f"{runs}/ckpt", every_n_train_steps=1, save_top_k=-1, filename="{step}")
    quiet_trainer(runs, [OrderValidator(), hashes, every], **train).fit(model("lm", dm), dm)
    fs = fsspec.filesystem("s3")
    assert fs.exists(f"{runs}/ckpt/step=3.ckpt") and fs.exists(f"{runs}/ckpt/tokenizer/tokenizer.json")
    resumed, again, validator = (
        OrderedLMDataModule(cache_dir=reader, **loader),
        BatchHashes(),
        OrderValidator(),
    )
    trainer = quiet_trainer(runs, [validator, again], **train)
    trainer.fit(model("lm", resumed), resumed, ckpt_path=f"{runs}/ckpt/step=3.ckpt")
    assert len(hashes.hashes()) == 6 and again.hashes() == hashes.hashes()[3:]
    assert validator.violations == []
    assert resumed.ledger.latest("train").stats["resumed_at"]["global_step"] == 3
    assert not list(tmp_path.rglob("s3:*"))


def test_the_prepare_command_publishes_to_the_server(s3_bucket, own_cache, tmp_path, monkeypatch, capsys):
    """``lightning-order prepare --data.cache_dir s3://...``: the manifest on the server, no local ``s3:`` folder."""
    from lightning_order.cli import dispatch as commands

    monkeypatch.chdir(tmp_path)
    url = f"s3://{s3_bucket}/prepared"
    config = str(Path(__file__).resolve().parents[2] / "configs" / "lm-demo.yaml")
    small = ["--data.max_documents=150", "--data.vocab_size=300", "--data.block_size=16", "--data.num_proc=1"]
    assert commands.main(["prepare", "--config", config, *small, "--data.cache_dir", url]) == 0
    assert "no violation" in capsys.readouterr().out
    key = OrderedLMDataModule(cache_dir=url, max_documents=150, vocab_size=300, block_size=16).cache_key
    assert fsspec.filesystem("s3").exists(f"{url}/{key}/manifest.json")
    assert not list(tmp_path.rglob("s3:*"))

"""The corpus read from object storage (issue #46 items 1, 5 and their tests of item 6), prepare by prepare.

Against the moto S3 server of ``tests/s3_server.py``, reached as users reach S3: the standard AWS
variables, or ``storage_options``. The corpus is real text (standard library docstrings). Shown
here: one corpus in two local folders and on the server has one cache key and prepares the same
files byte for byte (JSON lines and Parquet through the LM workers' ranged reads; csv, JSON lines
and Parquet through ``datasets`` for the classification pipeline), with the bytes fetched counted:
each object read once to identify it, and not again by a second prepare; an object overwritten
after a prepare is read again and gives a new key (a local copy's); ``input_hash="size_mtime"``
reads no byte of an object; the server stopped mid-read is one line naming the object,
nothing is published, and the run after ``start()`` completes; wrong credentials are one line;
the secret is in no file under the cache or the log folder, in no hyperparameter and in no error.
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from corpus_shapes import split_texts
from s3_server import SECRET_KEY

from lightning_order import OrderedDataModule, OrderedLMDataModule
from lightning_order.data.engine import input_digests, reading
from lightning_order.data.lm import range_reading
from lightning_order.errors import DataError

LM = {"vocab_size": 300, "block_size": 32, "batch_size": 8, "num_partitions": 2, "num_proc": 1}
TEXT = {"vocab_size": 100, "max_length": 16}


def _docs() -> list[str]:
    train, val = split_texts()
    return train + val


def _label(doc: str) -> int:
    return len(doc.split()) % 2


def _write_corpus(folder: Path, dataset: str, labelled: bool = False) -> list[Path]:
    """Two files of the corpus (JSON lines, Parquet of several row groups, or csv; csv always labelled)."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = _docs()
    halves = [docs[: len(docs) // 2], docs[len(docs) // 2 :]]
    paths = []
    for i, part in enumerate(halves):
        path = folder / f"part-{i}.{ {'json': 'jsonl'}.get(dataset, dataset) }"
        rows = [{"text": d, **({"label": _label(d)} if labelled else {})} for d in part]
        if dataset == "json":
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        elif dataset == "parquet":
            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=64)
        else:
            with open(path, "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["text", "label"])
                writer.writerows([d, _label(d)] for d in part)
        paths.append(path)
    return paths


def _upload(paths: list[Path], bucket: str) -> str:
    fs = fsspec.filesystem("s3")
    for path in paths:
        fs.put(str(path), f"{bucket}/corpus/{path.name}")
    return f"s3://{bucket}/corpus/*{paths[0].suffix}"


def _prepared(dm: Any) -> dict[str, str]:
    """sha256 of every prepared file but the manifest and the cache's own record (they name the key)."""
    root = Path(dm.cache_path)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", ".lightning_order")
    }


@pytest.fixture
def fetched(monkeypatch) -> list[int]:
    """The bytes of every ranged GET s3fs makes (a worker's reads, a footer, a file's first bytes)."""
    counts: list[int] = []
    real = s3fs.core.S3File._fetch_range

    def counted(self: Any, start: int, end: int) -> bytes:
        data = real(self, start, end)
        counts.append(len(data))
        return data

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counted)
    return counts


def _copy(paths: list[Path], folder: Path) -> Path:
    """The files copied to another folder (another place, the same bytes); the folder."""
    folder.mkdir(parents=True)
    for path in paths:
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


@pytest.mark.parametrize("dataset", ["json", "parquet"])
def test_one_lm_corpus_in_two_folders_and_on_the_server_has_one_key_and_prepares_the_same_files(
    s3_bucket, tmp_path, monkeypatch, fetched, dataset
):
    paths = _write_corpus(tmp_path / "local", dataset)
    elsewhere = _copy(paths, tmp_path / "another" / "place")
    url = _upload(paths, s3_bucket)
    local = [
        OrderedLMDataModule(
            dataset, data_files=str(folder / f"*{paths[0].suffix}"), cache_dir=str(tmp_path / f"c-{i}"), **LM
        )
        for i, folder in enumerate((tmp_path / "local", elsewhere))
    ]
    for dm in local:
        dm.prepare_data()

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the driver loaded the corpus through datasets")

    monkeypatch.setattr(reading, "load_files", no_download)  # the workers read their ranges themselves
    remote = OrderedLMDataModule(dataset, data_files=url, cache_dir=str(tmp_path / "c-remote"), **LM)
    # the location (folder, bucket) is not in the key: one key, and the same prepared files
    assert remote.cache_key == local[0].cache_key == local[1].cache_key
    corpus = sum(p.stat().st_size for p in paths)
    assert sum(fetched) == corpus  # each object read once, to identify it by its bytes
    remote.prepare_data()
    assert _prepared(remote) == _prepared(local[0]) == _prepared(local[1]) and len(_prepared(local[0])) > 10
    # the workers' reads: each byte fetched once (no driver download); a Parquet footer twice (the plan's and the worker's)
    footers = sum(pq.read_metadata(p).serialized_size + 8 for p in paths) if dataset == "parquet" else 0
    assert 0.9 * corpus <= sum(fetched) - corpus <= 1.1 * corpus + footers  # the target of #46: 1.1


def test_a_second_prepare_of_the_corpus_on_the_server_reads_no_byte_to_identify_it(
    s3_bucket, tmp_path, monkeypatch, fetched
):
    paths = _write_corpus(tmp_path / "local", "json")
    url = _upload(paths, s3_bucket)
    first = OrderedLMDataModule("json", data_files=url, cache_dir=str(tmp_path / "c"), **LM)
    first.prepare_data()
    # a second run is a new process: only this machine's digest records remain, not the first one's memory
    monkeypatch.setattr(input_digests, "_OBJECT_DIGESTS", {})
    fetched.clear()
    second = OrderedLMDataModule("json", data_files=url, cache_dir=str(tmp_path / "c"), **LM)
    second.prepare_data()  # the cache found: nothing to read either
    assert fetched == []  # metadata requests only (HEAD), no byte of an object
    local = OrderedLMDataModule("json", data_files=str(tmp_path / "local" / "*.jsonl"), **LM)
    assert second.cache_key == first.cache_key == local.cache_key


@pytest.mark.parametrize("dataset", ["csv", "json", "parquet"])
def test_one_classification_corpus_in_two_folders_and_on_the_server_has_one_key_and_the_same_files(
    s3_bucket, tmp_path, monkeypatch, dataset
):
    import datasets

    # the suite runs with HF_HUB_OFFLINE=1 (no hub), and datasets then refuses every URL, s3:// too
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    paths = _write_corpus(tmp_path / "local", dataset, labelled=True)
    elsewhere = _copy(paths, tmp_path / "another" / "place")
    url = _upload(paths, s3_bucket)
    names = [str(tmp_path / "local" / f"*{paths[0].suffix}"), str(elsewhere / f"*{paths[0].suffix}"), url]
    dms = [
        OrderedDataModule(dataset, data_files=name, cache_dir=str(tmp_path / f"c-{i}"), **TEXT)
        for i, name in enumerate(names)
    ]
    for dm in dms:
        dm.prepare_data()
    assert len({dm.cache_key for dm in dms}) == 1
    # datasets' state.json holds its fingerprint of our scratch files' random names (two prepares of one
    # local file differ there too): not data
    data = [{k: v for k, v in _prepared(dm).items() if not k.endswith("state.json")} for dm in dms]
    assert data[0] == data[1] == data[2] and any(k.endswith(".arrow") for k in data[0])


def test_an_object_overwritten_after_a_prepare_is_read_again_and_gives_a_local_copys_new_key(
    s3_bucket, tmp_path, fetched
):
    paths = _write_corpus(tmp_path / "local", "json")
    url = _upload(paths, s3_bucket)
    first = OrderedLMDataModule("json", data_files=url, cache_dir=str(tmp_path / "c"), **LM)
    first.prepare_data()
    fs = fsspec.filesystem("s3")
    docs = [json.loads(line)["text"] for line in paths[0].read_text().splitlines()]
    paths[0].write_text("".join(json.dumps({"text": d.upper()}) + "\n" for d in docs))  # the local copy too
    fs.put(str(paths[0]), f"{s3_bucket}/corpus/{paths[0].name}")
    fs.invalidate_cache()
    fetched.clear()
    second = OrderedLMDataModule("json", data_files=url, cache_dir=str(tmp_path / "c"), **LM)
    assert sum(fetched) == paths[0].stat().st_size  # the new version read once; the other object not at all
    assert second.cache_key != first.cache_key
    local = OrderedLMDataModule("json", data_files=str(tmp_path / "local" / "*.jsonl"), **LM)
    assert second.cache_key == local.cache_key
    second.prepare_data()
    assert Path(second.cache_path).is_dir() and _prepared(second) != _prepared(first)


def test_size_mtime_identifies_an_object_by_its_metadata_and_reads_no_byte(s3_bucket, tmp_path, fetched):
    paths = _write_corpus(tmp_path / "local", "json")
    url = _upload(paths, s3_bucket)
    fetched.clear()
    dm = OrderedLMDataModule("json", data_files=url, input_hash="size_mtime", **LM)
    assert fetched == []
    fs = fsspec.filesystem("s3")
    infos = [fs.info(f"{s3_bucket}/corpus/{p.name}") for p in paths]
    assert dm.config.input_identity == [[i["size"], i["ETag"].strip('"'), i.get("VersionId")] for i in infos]
    # content-following (an overwrite changes the ETag) but not a local copy's identity: another key
    local = OrderedLMDataModule(
        "json", data_files=str(tmp_path / "local" / "*.jsonl"), input_hash="size_mtime", **LM
    )
    assert dm.cache_key != local.cache_key


@pytest.fixture
def short_retries(monkeypatch) -> None:
    """A server that is gone is reported in a second or two, not after s3fs's and botocore's retries."""
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    s3fs.S3FileSystem.clear_instance_cache()


def test_the_server_stopped_mid_read_is_one_line_naming_the_object_and_a_rerun_completes(
    own_s3_server, short_retries, tmp_path, monkeypatch
):
    from s3_server import make_bucket

    bucket = make_bucket(own_s3_server.endpoint_url)
    url = _upload(_write_corpus(tmp_path / "local", "json"), bucket)
    dm = OrderedLMDataModule("json", data_files=url, cache_dir=str(tmp_path / "c"), **LM)
    real = range_reading.read_range

    def stop_then_read(item: dict[str, Any]) -> dict[str, Any]:
        own_s3_server.stop()  # the listing and the identity were read; the workers' reads fail
        return real(item)

    monkeypatch.setattr(range_reading, "read_range", stop_then_read)
    with pytest.raises(
        DataError, match=r"could not read s3://\S+/corpus/part-0\.jsonl on object storage"
    ) as info:
        dm.prepare_data()
    said = str(info.value)
    assert "\n" not in said and "reachable" in said and "Traceback" not in said
    assert not Path(dm.cache_path).exists()  # nothing published for a later run to trust
    assert not list((tmp_path / "c").glob(".tmp-*"))  # and no half-written preparation left
    monkeypatch.setattr(range_reading, "read_range", real)
    own_s3_server.start()
    dm.prepare_data()
    assert (Path(dm.cache_path) / "manifest.json").is_file()


def test_wrong_credentials_are_one_line_naming_the_object_and_the_fix(s3_bucket, monkeypatch, short_retries):
    from moto import settings

    fsspec.filesystem("s3").pipe(f"{s3_bucket}/corpus.jsonl", b'{"text": "one document"}\n')
    # moto's server checks signatures once this count of unauthenticated calls is spent: every key
    # it has not issued (ours) is refused as S3 refuses an unknown key (InvalidAccessKeyId, 403).
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(DataError) as info:
        OrderedLMDataModule("json", data_files=f"s3://{s3_bucket}/corpus.jsonl", num_proc=1)
    said = str(info.value)
    assert f"s3://{s3_bucket}/corpus.jsonl" in said and "check the credentials" in said and "\n" not in said
    assert "InvalidAccessKeyId" in said or "Forbidden" in said or "PermissionError" in said
    assert SECRET_KEY not in said


def test_storage_options_reach_every_read_and_the_secret_is_written_nowhere(
    s3_server, s3_bucket, tmp_path, monkeypatch, short_retries
):
    from pytorch_lightning.core.saving import save_hparams_to_yaml

    url = _upload(_write_corpus(tmp_path / "local", "json"), s3_bucket)
    options = {"key": "lightning-order-test-key", "secret": SECRET_KEY, "endpoint_url": s3_server}
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):  # only the options remain
        monkeypatch.delenv(name)
    s3fs.S3FileSystem.clear_instance_cache()
    dm = OrderedLMDataModule(
        "json", data_files=url, cache_dir=str(tmp_path / "cache"), storage_options=options, **LM
    )
    dm.prepare_data()
    dm.setup("fit")
    # Lightning writes dm.hparams to hparams.yaml and into every checkpoint (datamodule_hyper_parameters)
    assert "storage_options" not in dm.hparams and SECRET_KEY not in repr(dm.config)
    (tmp_path / "logs").mkdir()
    save_hparams_to_yaml(tmp_path / "logs" / "hparams.yaml", dm.hparams)
    for path in [*Path(tmp_path / "cache").rglob("*"), *Path(tmp_path / "logs").rglob("*")]:
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path
    broken = {**options, "endpoint_url": "http://127.0.0.1:9"}  # nothing listens: the error quotes no secret
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(DataError) as info:
        OrderedLMDataModule("json", data_files=url, storage_options=broken, num_proc=1)
    assert url.rsplit("/", 1)[0] in str(info.value) and SECRET_KEY not in str(info.value)

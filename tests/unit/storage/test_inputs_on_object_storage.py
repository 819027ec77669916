"""Inputs read from object storage (issue #46 item 1), below a whole prepare: listing, identity, workers' reads.

Against the moto S3 server of ``tests/s3_server.py`` (and ``memory://``): a glob or a prefix
names the objects it matches (hidden ones and other endings left out, as for local folders); an
object's identity follows its content (ETag, size, version), never its name alone; a worker reads
its own byte ranges and row groups from the store and gets exactly the documents it gets from a
local copy; an object rewritten while it is read is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from corpus_shapes import split_texts

from lightning_order import OrderedLMDataModule
from lightning_order.data.engine.inputs import expand_data_files, files_identity
from lightning_order.data.engine.reading import checked_read
from lightning_order.data.lm.file_ranges import plan_ranges, worker_files
from lightning_order.data.lm.range_reading import read_texts
from lightning_order.errors import DataError


def _docs(count: int = 120) -> list[str]:
    train, val = split_texts()  # real text: docstrings of the standard library
    return (train + val)[:count]


def test_a_glob_and_a_prefix_name_the_sorted_objects_they_match(s3_bucket):
    fs = fsspec.filesystem("s3")
    for key in ("b.jsonl", "a.jsonl", "sub/c.jsonl", ".hidden/d.jsonl", "notes.txt"):
        fs.pipe(f"{s3_bucket}/corpus/{key}", b'{"text": "x"}\n')
    root = f"s3://{s3_bucket}/corpus"
    assert expand_data_files(f"{root}/*.jsonl", "json") == [f"{root}/a.jsonl", f"{root}/b.jsonl"]
    assert expand_data_files(root, "json") == [f"{root}/a.jsonl", f"{root}/b.jsonl", f"{root}/sub/c.jsonl"]
    assert expand_data_files({"train": f"{root}/**/*.txt"}, "text") == {"train": [f"{root}/notes.txt"]}
    with pytest.raises(DataError, match=r"pattern .*\*\.parquet' matches no .parquet objects") as info:
        expand_data_files(f"{root}/*.parquet", "parquet")
    assert info.value.step == "load"


def test_a_memory_url_expands_through_fsspec_too():
    fs = fsspec.filesystem("memory")
    fs.pipe("/glob-test/x-1.jsonl", b"{}\n")
    fs.pipe("/glob-test/x-2.jsonl", b"{}\n")
    # fsspec's own spelling of each match (memory's paths are rooted at "/")
    assert expand_data_files("memory://glob-test/x-*.jsonl", "json") == [
        "memory:///glob-test/x-1.jsonl",
        "memory:///glob-test/x-2.jsonl",
    ]


def test_an_object_overwritten_with_other_documents_changes_its_identity_and_the_cache_key(s3_bucket):
    fs = fsspec.filesystem("s3")
    url = f"s3://{s3_bucket}/corpus.jsonl"
    fs.pipe(url, "".join(json.dumps({"text": d}) + "\n" for d in _docs()).encode())
    before = files_identity([url])
    key = OrderedLMDataModule("json", data_files=url, num_proc=1).cache_key
    fs.pipe(url, "".join(json.dumps({"text": d}) + "\n" for d in reversed(_docs())).encode())  # same size
    fs.invalidate_cache()
    after = files_identity([url])
    assert before[0][0] == after[0][0] and before[0][1] != after[0][1]  # the same size, other bytes
    assert OrderedLMDataModule("json", data_files=url, num_proc=1).cache_key != key


def _cfg(url: str, dataset: str, **kwargs) -> SimpleNamespace:
    base = {"dataset": dataset, "dataset_config": None, "max_documents": None, "text_column": "text",
            "sample_by": "line", "load_split": "train", "input_files": [url], "storage_options": None}  # fmt: skip
    return SimpleNamespace(**{**base, **kwargs})


def _write(path: Path, dataset: str, docs: list[str]) -> None:
    if dataset == "parquet":
        pq.write_table(pa.table({"text": docs}), path, row_group_size=20)
    elif dataset == "json":
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    else:
        path.write_text("\n".join(docs), newline="\r\n")


@pytest.mark.parametrize("dataset", ["json", "parquet", "text"])
def test_workers_read_their_ranges_from_the_store_as_from_a_local_copy(s3_bucket, tmp_path, dataset):
    local = tmp_path / f"docs.{dataset}"
    _write(local, dataset, _docs())
    url = f"s3://{s3_bucket}/docs.{dataset}"
    fsspec.filesystem("s3").put(str(local), url)
    assert worker_files(_cfg(url, dataset)) == [url]  # the worker path: no driver download
    size = 2000 if dataset != "parquet" else 1  # many ranges, cut anywhere; a run per row group
    remote = plan_ranges(_cfg(url, dataset), [url], size)
    near = plan_ranges(_cfg(str(local), dataset), [local], size)
    assert len(remote) == len(near) >= 5
    assert [(r.start, r.stop) for r in remote] == [(r.start, r.stop) for r in near]
    texts = [v for r in remote for v in read_texts(r)[0].to_pylist()]
    assert texts == [v for r in near for v in read_texts(r)[0].to_pylist()]
    assert len(texts) >= 120


def test_an_object_rewritten_while_it_is_read_is_refused(s3_bucket):
    fs = fsspec.filesystem("s3")
    url = f"s3://{s3_bucket}/corpus.jsonl"
    fs.pipe(url, "".join(json.dumps({"text": d}) + "\n" for d in _docs()).encode())
    cfg = OrderedLMDataModule("json", data_files=url, num_proc=1).config

    def read_while_rewritten() -> None:
        fs.pipe(url, b'{"text": "other documents"}\n')
        fs.invalidate_cache()

    with pytest.raises(DataError, match="a data file changed while it was read") as info:
        checked_read(cfg, read_while_rewritten)
    assert url in str(info.value) and info.value.step == "load"


def test_a_mixture_source_on_the_store_is_identified_by_its_objects_and_read_by_workers(s3_bucket, tmp_path):
    from lightning_order.data.lm.mixture import source_config

    fs = fsspec.filesystem("s3")
    fs.pipe(f"{s3_bucket}/web/a.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in _docs()).encode())
    local = tmp_path / "books.jsonl"
    _write(local, "json", _docs()[:20])
    sources = [{"path": f"s3://{s3_bucket}/web/*.jsonl", "weight": 0.7, "dataset": "json"},
               {"path": str(local), "weight": 0.3, "dataset": "json"}]  # fmt: skip
    cfg = OrderedLMDataModule(sources=sources, num_proc=1).config
    web = cfg.mixture_identity[0]["files"]
    body = "".join(json.dumps({"text": d}) + "\n" for d in _docs()).encode()
    assert web == [[len(body), f"xxh3:{xxhash.xxh3_128_hexdigest(body)}"]]  # its bytes, not its URL
    assert worker_files(source_config(cfg, cfg.source_list[0])) == [f"s3://{s3_bucket}/web/a.jsonl"]
    # a mixture named by paths (path -> weight: each source's default name is its path): a local copy
    # of the web source gives the same key, the name taken from where the files are left out
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "a.jsonl").write_bytes(body)
    keys = {
        OrderedLMDataModule(sources={web_path: 0.7, str(local): 0.3}, num_proc=1).cache_key
        for web_path in (f"s3://{s3_bucket}/web/*.jsonl", str(tmp_path / "web" / "*.jsonl"))
    }
    assert len(keys) == 1


# -- the content identity (issue #46: one key for a corpus read locally and from the server) ---------


@pytest.fixture
def hashed_objects(monkeypatch) -> list[str]:
    """The URL of every object read to identify it; this process's memory of digests emptied (a new process)."""
    from lightning_order.data.engine import input_digests

    seen: list[str] = []
    real = input_digests.hash_object
    monkeypatch.setattr(input_digests, "hash_object", lambda url, *a: seen.append(url) or real(url, *a))
    monkeypatch.setattr(input_digests, "_OBJECT_DIGESTS", {})
    return seen


def test_an_object_is_identified_by_the_digest_of_a_local_copy_read_once_per_version(
    s3_bucket, tmp_path, hashed_objects, monkeypatch
):
    from lightning_order.data.engine import input_digests
    from lightning_order.data.engine.cache import default_cache_dir
    from lightning_order.data.engine.input_digests import object_record_path

    local = tmp_path / "docs.jsonl"
    _write(local, "json", _docs())
    url = f"s3://{s3_bucket}/docs.jsonl"
    fsspec.filesystem("s3").put(str(local), url)
    assert files_identity([url]) == files_identity([str(local)])  # [size, "xxh3:..."]: no URL, no path
    assert hashed_objects == [url] and object_record_path(url, default_cache_dir()).is_file()
    monkeypatch.setattr(input_digests, "_OBJECT_DIGESTS", {})  # another process of this machine
    assert files_identity([url]) == files_identity([str(local)]) and hashed_objects == [url]  # its record


def test_objects_are_read_several_at_once_to_identify_them(s3_bucket, hashed_objects, monkeypatch):
    import threading
    import time

    from lightning_order.data.engine import input_digests

    fs = fsspec.filesystem("s3")
    urls = [f"s3://{s3_bucket}/part-{i}.jsonl" for i in range(6)]
    for i, url in enumerate(urls):
        fs.pipe(url, json.dumps({"text": _docs()[i]}).encode() + b"\n")
    running, most, lock = [0], [0], threading.Lock()
    real = input_digests.hash_object

    def slow(url: str, *args) -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)  # a read that waits on the network
        with lock:
            running[0] -= 1
        return real(url, *args)

    monkeypatch.setattr(input_digests, "hash_object", slow)
    identity = files_identity(urls)
    assert most[0] > 1 and len(identity) == 6  # not one after the other
    assert identity == [
        [len(fs.cat(u)), f"xxh3:{xxhash.xxh3_128_hexdigest(fs.cat(u))}"] for u in urls
    ]  # in order


def test_an_object_rewritten_while_it_is_read_to_identify_it_is_refused(
    s3_bucket, hashed_objects, monkeypatch
):
    import s3fs

    fs = fsspec.filesystem("s3")
    url = f"s3://{s3_bucket}/corpus.jsonl"
    fs.pipe(url, "".join(json.dumps({"text": d}) + "\n" for d in _docs()).encode())
    real = s3fs.core.S3File._fetch_range

    def rewritten_meanwhile(self, start: int, end: int) -> bytes:
        data = real(self, start, end)
        fs.pipe(url, b'{"text": "other documents"}\n')
        return data

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", rewritten_meanwhile)
    with pytest.raises(DataError, match="changed while it was read to identify it") as info:
        files_identity([url])
    assert url in str(info.value) and info.value.step == "load" and "\n" not in str(info.value)


def test_the_object_that_changed_after_the_datamodule_was_built_is_the_one_named(s3_bucket):
    fs = fsspec.filesystem("s3")
    urls = [f"s3://{s3_bucket}/corpus/part-{i}.jsonl" for i in range(2)]
    for i, url in enumerate(urls):
        fs.pipe(url, "".join(json.dumps({"text": d}) + "\n" for d in _docs()[i * 20 : i * 20 + 20]).encode())
    cfg = OrderedLMDataModule("json", data_files=f"s3://{s3_bucket}/corpus/*.jsonl", num_proc=1).config
    fs.pipe(urls[1], b'{"text": "other documents"}\n')
    fs.invalidate_cache()
    with pytest.raises(DataError, match="changed after the DataModule was built") as info:
        checked_read(cfg, lambda: None)
    # identities name no file: the entries are matched to the files by their place
    assert urls[1] in str(info.value) and urls[0] not in str(info.value)


def test_an_object_another_client_wrote_is_seen_though_this_process_listed_the_store_before(
    s3_server, s3_bucket
):
    """fsspec caches listings per process: the old ETag (so the old key) and the old list were served."""
    import boto3
    from s3_server import ACCESS_KEY, REGION, SECRET_KEY

    fs = fsspec.filesystem("s3")
    fs.pipe(f"{s3_bucket}/corpus/a.jsonl", b'{"text": "one document"}\n')
    pattern = f"s3://{s3_bucket}/corpus/*.jsonl"
    before = files_identity(expand_data_files(pattern, "json"))
    fs.glob(f"{s3_bucket}/corpus/*.jsonl", detail=True)  # the listing, with its ETags, cached
    client = boto3.client("s3", endpoint_url=s3_server, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)  # fmt: skip
    client.put_object(Bucket=s3_bucket, Key="corpus/a.jsonl", Body=b'{"text": "two document"}\n')  # same size
    client.put_object(Bucket=s3_bucket, Key="corpus/b.jsonl", Body=b'{"text": "three"}\n')
    files = expand_data_files(pattern, "json")
    assert files == [f"s3://{s3_bucket}/corpus/a.jsonl", f"s3://{s3_bucket}/corpus/b.jsonl"]
    after = files_identity(files)
    assert after[0][0] == before[0][0] and after[0][1] != before[0][1]  # its new bytes, not the listed ETag's

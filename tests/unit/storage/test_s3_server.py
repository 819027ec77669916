"""The S3 API server the object-storage tests run against behaves as S3 does where they rely on it."""

from __future__ import annotations

import fsspec
import pytest


def test_ranged_reads_etags_and_a_server_that_comes_back(own_s3_server, tmp_path):
    from s3_server import make_bucket

    bucket = make_bucket(own_s3_server.endpoint_url)
    fs = fsspec.filesystem("s3")  # from AWS_ENDPOINT_URL and the keys s3_env set
    path = f"{bucket}/corpus/part-0.txt"
    fs.pipe(path, b"0123456789" * 100)
    first_etag = fs.info(path)["ETag"]
    with fs.open(path, "rb") as handle:
        handle.seek(995)
        assert handle.read(5) == b"56789"

    fs.pipe(path, b"other documents")
    fs.invalidate_cache()
    assert fs.info(path)["ETag"] != first_etag

    own_s3_server.stop()
    fs.invalidate_cache()
    with pytest.raises(Exception):  # whichever error the client gives, it is not silent
        fs.cat(path)
    own_s3_server.start()
    assert fs.cat(path) == b"other documents"


def test_each_test_gets_an_empty_bucket(s3_bucket):
    fs = fsspec.filesystem("s3")
    assert fs.ls(s3_bucket) == []

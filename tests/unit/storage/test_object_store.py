"""Which paths name object storage, and the config's ``storage_options``."""

from __future__ import annotations

import pytest

from lightning_order import OrderedLMDataModule
from lightning_order.data.engine.object_store import (
    is_url,
    object_error,
    object_identity,
    redact,
    remote_errors,
    url_filesystem,
)
from lightning_order.errors import DataError


@pytest.mark.parametrize(
    ("path", "url"),
    [("s3://bucket/corpus.jsonl", True), ("gs://b/x", True), ("memory://x", True),
     ("file:///tmp/x", False), ("/tmp/s3:/x", False), ("data/corpus.jsonl", False), ("C:/x", False)],
)  # fmt: skip
def test_is_url(path: str, url: bool) -> None:
    assert is_url(path) is url


def test_storage_options_must_be_a_mapping_of_names() -> None:
    with pytest.raises(DataError, match="storage_options must be a mapping"):
        OrderedLMDataModule(storage_options=["key"])  # type: ignore[arg-type]


# --- url_filesystem, redact, object identity, reading (issue #46 items 1 and 5) ---------------


def test_url_filesystem_gives_the_filesystem_and_its_path() -> None:
    fs, path = url_filesystem("memory://corpus/a.jsonl")
    assert "memory" in fs.protocol and path.endswith("corpus/a.jsonl")


def test_a_scheme_whose_package_is_missing_is_one_line_naming_the_package() -> None:
    with pytest.raises(
        DataError, match=r"gs://, which needs gcsfs \(not installed\): pip install gcsfs"
    ) as info:
        url_filesystem("gs://bucket/corpus.jsonl")
    assert info.value.step == "load" and "\n" not in str(info.value)


def test_redact_replaces_the_environment_secrets_and_secret_named_options(monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-session-token")
    options = {"key": "option-key-id", "secret": "option-secret", "client_kwargs": {"aws_session_token": "nested-tok"},
               "endpoint_url": "http://127.0.0.1:9000"}  # fmt: skip
    text = "signed env-secret-value env-session-token option-key-id option-secret nested-tok http://127.0.0.1:9000"
    assert redact(text, options) == "signed *** *** *** *** *** http://127.0.0.1:9000"


def test_remote_errors_name_the_object_in_one_redacted_line(monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-secret-in-a-message")
    with pytest.raises(DataError) as info, remote_errors("load", "s3://b/corpus.jsonl", None):
        raise OSError("request\nsigned with the-secret-in-a-message failed")
    said = str(info.value)
    assert "s3://b/corpus.jsonl" in said and "***" in said and "the-secret" not in said and "\n" not in said


def test_an_object_without_a_content_digest_is_identified_by_its_bytes() -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ident/a.txt", b"first documents\n")
    first = object_identity("memory://ident/a.txt")
    assert first[:2] == ["memory://ident/a.txt", 16] and first[2].startswith("xxh3:")
    fs.pipe("/ident/a.txt", b"other documents\n")  # same size, same name: other bytes
    assert object_identity("memory://ident/a.txt") != first


def test_an_s3_object_is_identified_by_etag_size_and_version(s3_bucket) -> None:
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.pipe(f"{s3_bucket}/a.jsonl", b'{"text": "one"}\n')
    url = f"s3://{s3_bucket}/a.jsonl"
    first = object_identity(url)
    assert first[0] == url and first[1] == 16 and len(first[2]) == 32 and first[3] is None
    fs.pipe(f"{s3_bucket}/a.jsonl", b'{"text": "two"}\n')
    fs.invalidate_cache()
    assert object_identity(url)[2] != first[2]


@pytest.mark.parametrize("action", ["read", "write"])
def test_an_object_error_names_the_request_and_the_object_and_redacts_the_secrets(action) -> None:
    options = {"key": "AKIDEXAMPLE", "secret": "wJalrXUtnFEMI-secret"}
    error = object_error(
        ConnectionError("refused: https://store/b/k?X-Amz-Credential=AKIDEXAMPLE&sig=wJalrXUtnFEMI-secret"),
        "s3://b/k", "setup", options, action,
    )  # fmt: skip
    text = str(error)
    assert f"could not {action} s3://b/k on object storage" in text and "\n" not in text
    assert error.step == "setup" and "check that the store is reachable" in text
    assert "AKIDEXAMPLE" not in text and "wJalrXUtnFEMI-secret" not in text and "***" in text
    denied = object_error(PermissionError("Access Denied"), "s3://b/k", "save", None, action)
    assert f"that they may {action} this object" in str(denied)

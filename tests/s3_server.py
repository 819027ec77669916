"""An S3 API server on 127.0.0.1 for the object-storage tests (#46).

moto's standalone server speaks the S3 HTTP API (multipart uploads, ranged reads, ETags,
conditional writes) in a thread of the test process. Tests reach it as users reach S3: through
the standard AWS environment variables, which :func:`s3_env` sets, and ``s3fs`` / ``fsspec``.

Fixtures (registered in ``tests/conftest.py``):

- ``s3_server``: one server for the session; its endpoint URL.
- ``s3_bucket``: a fresh, empty bucket on it for one test, with the AWS variables set; its name.
- ``own_s3_server``: a server of the test's own, which the test may stop (``.stop()``) and start
  again (``.start()``) on the same port, for the faults of a server gone mid-read or mid-publish
  (a client tries once: s3fs's and botocore's retries set to one).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest

ACCESS_KEY = "lightning-order-test-key"
SECRET_KEY = "lightning-order-test-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class S3Server:
    """A moto S3 server on 127.0.0.1 that can be stopped and started again on its port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._server = None

    def start(self) -> S3Server:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def reset(self) -> None:
        """Forget every bucket and object (moto keeps them per process, across restarts)."""
        import requests

        requests.post(f"{self.endpoint_url}/moto-api/reset", timeout=10)


def s3_env(monkeypatch: pytest.MonkeyPatch, endpoint_url: str) -> None:
    """Point the standard AWS variables at ``endpoint_url``, as a user configures S3 anywhere."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    # s3fs caches filesystem instances (and their listings) per arguments: a test's own server or
    # bucket must not see the previous test's.
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def make_bucket(endpoint_url: str) -> str:
    """Create an empty bucket with a fresh name on the server; return its name."""
    import boto3

    name = f"lo-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
    )
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    server = S3Server().start()
    yield server.endpoint_url
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    s3_env(monkeypatch, s3_server)
    return make_bucket(s3_server)


@pytest.fixture
def own_s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    import s3fs

    server = S3Server().start()
    s3_env(monkeypatch, server.endpoint_url)
    # A server the test stops is reported after one try, not after s3fs's and botocore's retries.
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    yield server
    server.stop()

"""Joining a Ray cluster is bounded and says what is wrong in one line (issue #32).

A malformed ``ray_address`` used to be Ray's raw ``ValueError``, an unreachable one blocked for
more than 200 s holding the cache lock, and a client address was Ray's raw error. No cluster is
started here: the failures happen before one would be needed.
"""

from __future__ import annotations

import socket
import threading

import pytest

ray = pytest.importorskip("ray")

from lightning_order import DataError  # noqa: E402
from lightning_order.data.engine import ray_engine  # noqa: E402
from lightning_order.data.engine.ray_engine import RayEngine, check_ray_address  # noqa: E402
from lightning_order.data.lm.config import LMConfig  # noqa: E402


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(ray_engine, "CONNECT_TIMEOUT_S", 2.0)
    assert not ray.is_initialized()
    yield
    assert not ray.is_initialized()  # no failed attempt leaves a Ray connected


@pytest.fixture
def listener():
    """A port where something accepts connections but no Ray answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def _construct(address: str) -> BaseException | None:
    """``RayEngine(address)`` in a thread, bounded well above the connect timeout: what it raised."""
    raised: list[BaseException | None] = []

    def construct() -> None:
        try:
            RayEngine(address=address).close()
            raised.append(None)
        except BaseException as err:
            raised.append(err)

    thread = threading.Thread(target=construct, daemon=True)
    thread.start()
    thread.join(60)
    assert raised, f"RayEngine(address={address!r}) did not return"
    return raised[0]


@pytest.mark.parametrize(
    "address", ["not-an-address", "127.0.0.1", "head:0", "head:99999", "http://head:6379", "", " :6379", 6379]
)
def test_a_malformed_address_is_refused_with_the_config(address):
    with pytest.raises(DataError) as caught:
        LMConfig(engine="ray", ray_address=address).validate()
    assert caught.value.step == "load"
    assert f"ray_address={address!r} is not a Ray address" in str(caught.value)
    assert "'host:port'" in str(caught.value) and "null (a local Ray)" in str(caught.value)
    error = _construct(address) if isinstance(address, str) else None
    if error is not None:
        assert isinstance(error, DataError) and "is not a Ray address" in str(error)


@pytest.mark.parametrize(
    "address", [None, "auto", "local", "10.0.0.1:6379", "ray://head:10001", "[::1]:6379"]
)
def test_the_forms_ray_takes_are_accepted(address):
    assert check_ray_address(address) == address


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_address_is_one_line_at_once(address):
    error = _construct(address)
    assert isinstance(error, DataError) and error.step == "load"
    message = str(error)
    assert f"ray_address={address!r}: no Ray cluster is reachable there" in message
    assert "ray start --head" in message and "ray_address=null" in message and "\n" not in message


def test_an_address_where_ray_never_answers_is_refused_after_the_timeout(listener, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(ray, "init", lambda **kwargs: release.wait(60))  # Ray retrying an absent GCS
    try:
        error = _construct(f"127.0.0.1:{listener}")
    finally:
        release.set()
    assert isinstance(error, DataError) and error.step == "load"
    assert f"ray_address='127.0.0.1:{listener}': Ray did not connect within 2 s" in str(error)
    assert "ray status" in str(error)


def test_a_client_address_without_ray_client_is_one_line(listener):
    from ray._private.utils import get_ray_client_dependency_error

    if get_ray_client_dependency_error() is None:
        pytest.skip("ray[client] is installed: Ray would try the fake client server")
    error = _construct(f"ray://127.0.0.1:{listener}")
    assert isinstance(error, DataError) and error.step == "load"
    message = str(error)
    assert f"ray_address='ray://127.0.0.1:{listener}': Ray could not connect (ValueError" in message
    assert "pip install 'ray[client]'" in message and "'host:6379'" in message and "\n" not in message


def test_a_preparation_on_an_unreachable_cluster_fails_without_keeping_the_lock(tmp_path):
    from filelock import FileLock

    from lightning_order.data.lm import prepare

    config = LMConfig(engine="ray", ray_address="127.0.0.1:1", max_documents=50, cache_dir=str(tmp_path))
    order = prepare.order_of(config, None)
    with pytest.raises(DataError, match=r"^\[step 'load'\] ray_address='127.0.0.1:1': no Ray cluster"):
        prepare.prepare_cache(tmp_path, config, order)
    key = prepare.cache_key(config, order)
    assert not (tmp_path / key).exists()  # nothing published
    with FileLock(str(tmp_path / f"{key}.lock"), timeout=0):  # free at once: the next run can prepare
        pass


def test_ray_init_failing_is_one_line_naming_the_address(monkeypatch):
    def refuse(**kwargs):
        raise ConnectionError(
            "Could not find any running Ray instance.\nPlease specify the one to connect to."
        )

    monkeypatch.setattr(ray, "init", refuse)  # 'auto' on a machine where `ray start` never ran
    error = _construct("auto")
    assert isinstance(error, DataError) and error.step == "load"
    message = str(error)
    assert "ray_address='auto': Ray could not connect (ConnectionError: Please specify" in message
    assert "ray status" in message and "\n" not in message

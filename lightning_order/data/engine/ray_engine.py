"""The Ray engine: the same per-partition work as Ray tasks, on a local Ray or a cluster (the ``ray`` extra).

``OrderedLMDataModule(engine="ray")`` hands every work item to a Ray task (one CPU each) and
gets the results back in item order, exactly as :class:`~.engines.LocalEngine` does with its
processes, so the prepared data, its fingerprints and its blocks are the same. A task runs its
item as a local worker does (:func:`~.workers.run_in_worker`): the tokenizer on its one CPU's
thread, and what the item freed handed back to the system after it. Nothing here
launches processes on other machines: with ``ray_address=None`` a local Ray is started with
``num_proc`` CPUs (and shut down after), with an address the driver joins that cluster (started
by ``ray start``, KubeRay or a Slurm script) and leaves it running.

Joining a cluster is bounded: a malformed ``ray_address`` is refused when the config is checked
(:func:`check_ray_address`), an address where nothing answers within
:data:`CONNECT_TIMEOUT_S` is one :class:`~lightning_order.errors.DataError` naming ``ray_address``,
its value and the fix, and so is a ``ray.init`` that fails or does not return in that time: the
cache lock is never held while Ray waits forever.

The work items name files; on a cluster the cache folder must be on storage every node sees (a
shared file system path), as the prepared data itself is (docs/scale.md); for a ``cache_dir`` on
object storage that is the staging folder, and the tasks upload the large files they write
straight to the store (:mod:`lightning_order.data.lm.publishing`). A task whose worker
dies is retried by Ray (``max_retries``); every task writes its own files under fixed names, so a
retry rewrites them whole.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lightning_order.data.engine.progress import track
from lightning_order.data.engine.workers import run_in_worker
from lightning_order.errors import DataError

__all__ = ["CONNECT_TIMEOUT_S", "RayEngine", "check_ray_address"]

#: How often Ray retries a task whose worker died (a task that raises is not retried).
MAX_RETRIES = 3
#: The most seconds joining a cluster may take: its port answering and ``ray.init`` returning, together.
CONNECT_TIMEOUT_S = 30.0
#: ``ray_address`` values that name no host: the cluster ``ray start`` left on this machine, a new local Ray.
_NAMED_ADDRESSES = ("auto", "local")
_CLIENT = "ray://"
_FORMS = (
    "expected 'host:port' (the head's GCS port, e.g. '10.0.0.1:6379'), 'auto' (the cluster `ray start` "
    "runs on this machine), 'ray://host:10001' (Ray Client), or null (a local Ray)"
)


class RayEngine:
    """Runs each work item as a Ray task.

    Args:
        address: a running cluster's address (``"auto"``, ``"ray://head:10001"``); ``None``
            starts a local Ray (``address="local"``: never a stale cluster found on this machine).
        num_cpus: CPUs of the local Ray (ignored with an address).

    Attributes:
        startup_seconds: how long connecting (or starting a local Ray) took.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as err:
            raise DataError(
                "engine='ray' needs Ray: pip install 'lightning-order[ray]' (or engine='local')", step="load"
            ) from err
        start = time.perf_counter()
        # A Ray this process already runs (a test's, a user's) is used and left as it is.
        self._connected = not ray.is_initialized()
        if self._connected:
            if address is None:
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:
                _join(address)
        self.startup_seconds = time.perf_counter() - start
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote: Any = None

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], weight: int | None = None, desc: str = ""
    ) -> list[Any]:
        """``[fn(item) for item in items]``, each item a Ray task, results in item order."""
        import ray

        if self._remote is None:  # every task as a local worker runs it: one thread, its memory handed back
            self._remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(run_in_worker)
        refs = [self._remote.remote((fn, item)) for item in items]
        # One result at a time, in item order (the bar moves as they arrive).
        results = (self._get(ref, fn, index) for index, ref in enumerate(refs))
        return list(track(results, desc=desc or fn.__name__, total=len(refs), text_bytes=weight))

    @staticmethod
    def _get(ref: Any, fn: Callable[[Any], Any], index: int) -> Any:
        """A task's result; our own error raised inside it as itself, Ray's failures as one DataError."""
        import ray
        from ray.exceptions import RayError, RayTaskError

        from lightning_order.errors import LightningOrderError

        try:
            return ray.get(ref)
        except RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, LightningOrderError):
                raise cause from None
            raise DataError(
                f"the Ray task {fn.__name__} failed on work item {index}: {type(cause or err).__name__}: "
                f"{str(cause or err).splitlines()[-1] if str(cause or err) else ''}",
                step=None,
            ) from err
        except RayError as err:
            raise DataError(
                f"the Ray task {fn.__name__} on work item {index} was lost ({type(err).__name__}: a worker or "
                f"node died, {MAX_RETRIES} retries included); nothing was published: run the preparation again",
                step=None,
            ) from err

    def start(self, weight: int | None = None) -> None:
        """Nothing to start: Ray's workers are up."""

    def close(self) -> None:
        """Shuts down the local Ray this engine started, or leaves the cluster it joined (never another's Ray)."""
        import ray

        self._remote = None
        if self._connected and ray.is_initialized():
            ray.shutdown()


def check_ray_address(address: Any) -> str | None:
    """``address`` if it is ``None`` or a form Ray takes; else one :class:`DataError` listing the forms.

    The forms: ``"host:port"``, ``"ray://host:port"`` (Ray Client), ``"auto"``, ``"local"``.
    Checked with the config, before any lock is taken or Ray is imported.

    Raises:
        DataError: ``address`` is not a string of one of the forms, naming ``ray_address`` and its value.
    """
    if address is None:
        return None
    if not isinstance(address, str) or (_host_port(address) is None and address not in _NAMED_ADDRESSES):
        raise DataError(f"ray_address={address!r} is not a Ray address: {_FORMS}", step="load")
    return address


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``"host:port"`` or ``"ray://host:port"``; ``None`` for anything else."""
    host, colon, port = address.removeprefix(_CLIENT).rpartition(":")
    host = host.strip("[]")  # an IPv6 host is written in brackets
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if any(c.isspace() or c in "/@?#" for c in host):
        return None
    return host, int(port)


def _join(address: str) -> None:
    """``ray.init(address)`` within :data:`CONNECT_TIMEOUT_S`, or one :class:`DataError` naming ``ray_address``."""
    check_ray_address(address)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S  # the probe and ray.init together
    target = _host_port(address)
    if target is not None:
        _probe(address, *target)
    outcome: list[BaseException | None] = []
    abandoned = threading.Event()

    def init() -> None:
        import ray

        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            outcome.append(None)
            if abandoned.is_set():  # connected after the preparation gave up: leave the cluster
                ray.shutdown()
        except BaseException as err:  # Ray raises SystemExit, ConnectionError, ValueError...
            outcome.append(err)

    # ray.init has no timeout of its own (it retries an absent GCS for minutes): it runs in a daemon
    # thread, waited for a bounded time, so a preparation never holds the cache lock forever.
    thread = threading.Thread(target=init, name="lightning-order-ray-init", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.1))
    if not outcome:
        abandoned.set()
        answered = "something answers there, but no Ray cluster" if target else "no cluster answered"
        raise DataError(
            f"ray_address={address!r}: Ray did not connect within {CONNECT_TIMEOUT_S:g} s ({answered}); pass "
            "the head's GCS address ('host:6379', see `ray status`) or ray_address=null for a local Ray",
            step="load",
        )
    if outcome[0] is not None:
        raise DataError(_init_failure(address, outcome[0]), step="load") from outcome[0]


def _probe(address: str, host: str, port: int) -> None:
    """One :class:`DataError` unless something accepts a connection at ``host:port`` within :data:`CONNECT_TIMEOUT_S`."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as err:
        timed_out = isinstance(err, TimeoutError)
        reason = (
            f"no answer within {CONNECT_TIMEOUT_S:g} s" if timed_out else err.strerror or type(err).__name__
        )
        raise DataError(
            f"ray_address={address!r}: no Ray cluster is reachable there ({reason}); start it (`ray start "
            "--head`), fix the address (see `ray status` on the head), or pass ray_address=null for a local Ray",
            step="load",
        ) from err


def _init_failure(address: str, err: BaseException) -> str:
    """The line for a ``ray.init`` that raised: the address, Ray's last line, and the fix."""
    said = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
    if address.startswith(_CLIENT):
        fix = (
            "a Ray Client address needs `pip install 'ray[client]'` and the cluster's client server "
            "(port 10001); or pass the head's GCS address 'host:6379' from a node of the cluster"
        )
    else:
        fix = "check that the cluster runs (`ray status`) and that this Ray's version is the cluster's"
    return f"ray_address={address!r}: Ray could not connect ({type(err).__name__}: {said}); {fix}"

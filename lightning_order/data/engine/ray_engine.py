"""The Ray engine: the same per-partition work as Ray tasks, on a local Ray or a cluster (the ``ray`` extra).

``OrderedLMDataModule(engine="ray")`` hands every work item to a Ray task (one CPU each) and
gets the results back in item order, exactly as :class:`~.engines.LocalEngine` does with its
processes, so the prepared data, its fingerprints and its blocks are the same. A task runs its
item as a local worker does (:func:`~.workers.run_in_worker`): the tokenizer on its one CPU's
thread, and what the item freed handed back to the system after it. Nothing here
launches processes on other machines: with ``ray_address=None`` a local Ray is started with
``num_proc`` CPUs (and shut down after), with an address the driver joins that cluster (started
by ``ray start``, KubeRay or a Slurm script) and leaves it running.

The work items name files; on a cluster the cache folder must be on storage every node sees (a
shared file system path), as the prepared data itself is (docs/scale.md). A task whose worker
dies is retried by Ray (``max_retries``); every task writes its own files under fixed names, so a
retry rewrites them whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from lightning_order.data.engine.progress import track
from lightning_order.data.engine.workers import run_in_worker
from lightning_order.errors import DataError

__all__ = ["RayEngine"]

#: How often Ray retries a task whose worker died (a task that raises is not retried).
MAX_RETRIES = 3


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
                ray.init(address=address, log_to_driver=False, configure_logging=False)
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

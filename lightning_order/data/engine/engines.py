"""Engines: where the per-partition work of a preparation runs (processes here, a Ray cluster elsewhere).

A step that works per partition hands a picklable, module-level function and a list of work
items to its engine's :meth:`Engine.map` and gets the results back in the items' order. What a
function computes depends on its item alone, and every result is combined by the step in item
order, so the prepared data is the same whichever engine ran it and however many processes it
had: the engine is recorded in the ledger's ``load`` record and enters no fingerprint.

* :class:`LocalEngine`: ``num_proc`` processes on this machine (a
  :class:`concurrent.futures.ProcessPoolExecutor`), or the calling process itself when there is
  one process or the work is small (starting processes would cost more than it saves). Workers
  are forked where the platform can (as ``datasets``' ``num_proc`` and PyTorch's loaders do), so
  a script needs no ``if __name__ == "__main__":`` guard; elsewhere they are spawned. The Rust
  parts (tokenizers, rensa) keep their own threads inside each process; the pool is started
  before the parent trains the tokenizer, so no worker inherits a busy thread pool.
* ``RayEngine`` (:mod:`.ray_engine`, the ``ray`` extra): the same functions as Ray tasks, on a
  local Ray or a cluster.

No scheduler is written here: a pool's ``map`` (or Ray's tasks) is the whole of it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol

from lightning_order.data.engine.progress import track
from lightning_order.data.engine.workers import release_memory, run_released, worker_start

__all__ = ["MIN_PARALLEL_BYTES", "Engine", "LocalEngine", "make_engine", "release_memory"]

#: Below this much work (bytes of text, summed over the items) a map runs in the calling process.
MIN_PARALLEL_BYTES = 8 << 20


class Engine(Protocol):
    """What a step needs of an engine."""

    name: str
    workers: int

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], weight: int | None = None, desc: str = ""
    ) -> list[Any]:
        """``[fn(item) for item in items]``, computed wherever the engine runs work, in item order.

        ``weight`` (bytes of text the items hold) lets a small map run in the calling process and
        a bar show MB/s; ``desc`` names the pass on the progress bar.
        """
        ...

    def close(self) -> None:
        """Releases the engine's processes (or cluster connection)."""
        ...


class LocalEngine:
    """``num_proc`` processes on this machine (see the module docstring).

    Args:
        num_proc: worker processes (1: everything runs in the calling process).
        min_parallel_bytes: maps whose ``weight`` is below this run in the calling process
            (``None``: :data:`MIN_PARALLEL_BYTES`, read when a map starts).
    """

    name = "local"

    def __init__(self, num_proc: int, min_parallel_bytes: int | None = None) -> None:
        self.workers = max(1, int(num_proc))
        self.min_parallel_bytes = min_parallel_bytes
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(method),
                initializer=worker_start,
            )
        return self._pool

    def start(self, weight: int | None = None) -> None:
        """Starts the worker processes now, when a map of ``weight`` would use them.

        A preparation starts them once it knows the corpus size, before it trains a tokenizer
        (whose threads a forked worker must not inherit).
        """
        floor = MIN_PARALLEL_BYTES if self.min_parallel_bytes is None else self.min_parallel_bytes
        if self.workers > 1 and (weight is None or weight >= floor):
            self._executor()

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], weight: int | None = None, desc: str = ""
    ) -> list[Any]:
        """``[fn(item) for item in items]``, in processes when there are several and the work is large."""
        items = list(items)
        floor = MIN_PARALLEL_BYTES if self.min_parallel_bytes is None else self.min_parallel_bytes
        small = weight is not None and weight < floor
        if self.workers == 1 or len(items) <= 1 or small:
            results: Any = (fn(item) for item in items)
        else:
            results = self._executor().map(run_released, [(fn, item) for item in items], chunksize=1)
        return list(track(results, desc=desc or fn.__name__, total=len(items), text_bytes=weight))

    def close(self) -> None:
        """Shuts the worker processes down (a later map starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_engine(name: str, num_proc: int, address: str | None = None) -> Engine:
    """The engine called ``name`` (``"local"`` or ``"ray"``) with ``num_proc`` workers."""
    if name == "ray":
        from lightning_order.data.engine.ray_engine import RayEngine

        return RayEngine(address=address, num_cpus=num_proc)
    return LocalEngine(num_proc)

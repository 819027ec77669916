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
  before the parent trains the tokenizer, so no worker inherits a busy thread pool. Workers die
  with the process that started them (:func:`~.workers.die_with_parent`), and a worker that dies
  mid-step (the out-of-memory killer) is one :class:`~lightning_order.errors.DataError` naming
  the pass, the signal and the likely cause, never a raw ``BrokenProcessPool``.
* ``RayEngine`` (:mod:`.ray_engine`, the ``ray`` extra): the same functions as Ray tasks, on a
  local Ray or a cluster.

No scheduler is written here: a pool's ``map`` (or Ray's tasks) is the whole of it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from lightning_order.data.engine.progress import track
from lightning_order.data.engine.workers import local_worker_start, release_memory, run_released
from lightning_order.errors import DataError

__all__ = ["MIN_PARALLEL_BYTES", "Engine", "LocalEngine", "errors_named", "make_engine", "release_memory"]

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
                initializer=local_worker_start,
                initargs=(os.getpid(),),
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
        desc = desc or fn.__name__
        # One item runs here unless the workers are already up: a driver never does a worker's
        # share of a large job (the last merge of dedup's clusters is one item).
        alone = len(items) <= 1 and self._pool is None
        if self.workers == 1 or not items or alone or small:
            results: Any = (fn(item) for item in items)
            return list(track(results, desc=desc, total=len(items), text_bytes=weight))
        pool = self._executor()
        try:  # a worker that died while the pool idled breaks the submission itself
            results = pool.map(run_released, [(fn, item) for item in items], chunksize=1)
            return list(track(results, desc=desc, total=len(items), text_bytes=weight))
        except BrokenProcessPool as err:
            workers = list((getattr(pool, "_processes", None) or {}).values())
            self.close()  # joins the pool's processes: their exit codes are known after
            codes = [worker.exitcode for worker in workers]
            raise DataError(self._death_message(fn, desc, codes), step=None) from err

    def _death_message(self, fn: Callable[[Any], Any], desc: str, codes: Sequence[int | None]) -> str:
        """One line for a pool whose worker died: which pass, which signal, the likely cause and the fix."""
        return (
            f"a worker process died while running {fn.__name__} ({desc}){_death_cause(codes)}; the likeliest "
            f"cause is memory (the system's out-of-memory killer ends the largest process): lower num_proc "
            f"(now {self.workers}, each worker holds one partition) or raise num_partitions (smaller "
            "partitions), then prepare again; nothing was published"
        )

    def close(self) -> None:
        """Shuts the worker processes down (a later map starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def errors_named(step: str) -> Iterator[None]:
    """A block whose step-less :class:`DataError` (an engine's: a worker died, a Ray task was lost) names ``step``.

    An engine runs functions for any step and does not know which one; the runner does.
    """
    try:
        yield
    except DataError as err:
        if err.step is not None or type(err) is not DataError:
            raise
        raise DataError(str(err), step=step) from err


def _death_cause(codes: Sequence[int | None]) -> str:
    """`` (killed by signal 9, SIGKILL)`` for the worker that died first, as far as its exit code says."""
    # The pool terminates the other workers (SIGTERM) once one has died: the odd one out is the cause.
    killed = [code for code in codes if code is not None and code < 0 and -code != signal.SIGTERM]
    others = [code for code in codes if code not in (None, 0, -signal.SIGTERM)]
    code = (killed or others or [None])[0]
    if code is None:
        return ""
    if code < 0:
        try:
            return f" (killed by signal {-code}, {signal.Signals(-code).name})"
        except ValueError:
            return f" (killed by signal {-code})"
    return f" (exit code {code})"


def make_engine(name: str, num_proc: int, address: str | None = None) -> Engine:
    """The engine called ``name`` (``"local"`` or ``"ray"``) with ``num_proc`` workers."""
    if name == "ray":
        from lightning_order.data.engine.ray_engine import RayEngine

        return RayEngine(address=address, num_cpus=num_proc)
    return LocalEngine(num_proc)

"""How a worker runs one work item, on any engine: one thread for the Rust parts, memory handed back after.

:class:`~.engines.LocalEngine`'s processes and :class:`~.ray_engine.RayEngine`'s tasks both run
an item through :func:`run_in_worker`, and the calling process calls :func:`release_memory`
after each step. A local pool's processes also die with the process that started them
(:func:`die_with_parent`): a preparation killed by SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "PARENT_POLL_SECONDS",
    "die_with_parent",
    "local_worker_start",
    "release_memory",
    "run_in_worker",
    "run_released",
    "worker_start",
]

#: How often a worker without a parent-death signal (not Linux) checks that its parent lives.
PARENT_POLL_SECONDS = 1.0
#: ``prctl``'s option that asks the kernel for a signal when the parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def worker_start() -> None:
    """In each worker: one process per core already uses every core, so no Rust thread pool in it.

    Set in the worker only: the calling process trains the tokenizer with tokenizers' own threads.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def local_worker_start(parent: int) -> None:
    """The initializer of a local pool's processes: :func:`worker_start`, then :func:`die_with_parent`."""
    worker_start()
    die_with_parent(parent)


def die_with_parent(parent: int) -> None:
    """Ends this process when ``parent`` (the process that started it) dies, however it dies.

    A pool's workers are not told when their parent is killed (SIGKILL, the out-of-memory
    killer): they would live on, reparented, each holding its memory, for good. On Linux the
    kernel kills this process when the parent dies (``PR_SET_PDEATHSIG``; it fires when the
    *thread* that forked exits, and the pool is started and shut down by the preparing thread);
    elsewhere a daemon thread polls the parent's pid every :data:`PARENT_POLL_SECONDS`.

    Args:
        parent: the pid of the process that started this worker.
    """
    if _set_parent_death_signal():
        # The parent may have died between the fork and prctl: no signal would ever come.
        if os.getppid() != parent:
            os._exit(1)
        return
    watch = threading.Thread(target=_watch_parent, args=(parent,), name="lightning-order-parent", daemon=True)
    watch.start()


def _set_parent_death_signal() -> bool:
    """Asks the kernel for SIGKILL at the parent's death; False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def run_in_worker(call: tuple[Callable[[Any], Any], Any]) -> Any:
    """``fn(item)`` as any engine's worker runs it (a Ray task too): one thread, memory handed back after."""
    worker_start()
    return run_released(call)


def run_released(call: tuple[Callable[[Any], Any], Any]) -> Any:
    """``fn(item)`` in a worker, then the memory it freed handed back to the system.

    A worker lives through many items; without this, the peak of its largest item (Arrow's pool,
    the C heap) stays resident while it idles or runs small ones, and the tree's memory grows with
    the number of items it ever ran instead of the largest one.
    """
    fn, item = call
    try:
        return fn(item)
    finally:
        release_memory()


def release_memory() -> None:
    """Returns freed memory to the system: Arrow's pool, then glibc's heap (elsewhere only Arrow's)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None

"""How a worker runs one work item, on any engine: one thread for the Rust parts, memory handed back after.

:class:`~.engines.LocalEngine`'s processes and :class:`~.ray_engine.RayEngine`'s tasks both run
an item through :func:`run_in_worker`, and the calling process calls :func:`release_memory`
after each step.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from typing import Any

__all__ = ["release_memory", "run_in_worker", "run_released", "worker_start"]


def worker_start() -> None:
    """In each worker: one process per core already uses every core, so no Rust thread pool in it.

    Set in the worker only: the calling process trains the tokenizer with tokenizers' own threads.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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

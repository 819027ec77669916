"""Progress of a long preparation, as ``datasets`` shows it: one bar per pass, with documents and MB/s.

Shown when ``datasets``' progress bars are on (``datasets.disable_progress_bars()`` or
``HF_DATASETS_DISABLE_PROGRESS_BARS=1`` turn both off) and ``LIGHTNING_ORDER_PROGRESS`` is not
``0``; quiet in tests and CI, which set either. Bars go to stderr through ``tqdm``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["enabled", "track"]

_T = TypeVar("_T")


def enabled() -> bool:
    """Whether progress bars are shown (see the module docstring)."""
    if os.environ.get("LIGHTNING_ORDER_PROGRESS", "1") == "0":
        return False
    try:
        from datasets.utils.logging import is_progress_bar_enabled
    except ImportError:  # pragma: no cover - datasets is a dependency
        return True
    return bool(is_progress_bar_enabled())


def track(items: Iterable[_T], *, desc: str, total: int, text_bytes: int | None = None) -> Iterator[_T]:
    """Yields ``items``, showing a bar of ``total`` work items and, given ``text_bytes``, the MB/s."""
    if not enabled() or total <= 1:
        yield from items
        return
    from tqdm.auto import tqdm

    start = time.perf_counter()
    with tqdm(total=total, desc=f"lightning_order {desc}", unit="part", leave=False) as bar:
        for done, item in enumerate(items, start=1):
            bar.update(1)
            if text_bytes:
                seconds = max(time.perf_counter() - start, 1e-9)
                bar.set_postfix_str(f"{text_bytes * done / total / seconds / 1e6:.1f} MB/s", refresh=False)
            yield item


def summary(desc: str, **figures: Any) -> None:
    """One line after a pass (documents, MB, seconds...), when progress is shown."""
    if enabled():
        import sys

        shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in figures.items())
        sys.stderr.write(f"lightning_order {desc}: {shown}\n")

"""A recording engine and a tiny corpus: what the driver sends to and gets from its workers, measured.

Used by the tests of issue #35 item 2 (O(partitions) on the driver): every work item and every
result is pickled as a process pool or Ray would pickle it, and the largest per task recorded.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

from lightning_order.data.engine import engines


class RecordingEngine(engines.LocalEngine):
    """Runs in this process and records, per task function, the largest pickled work item and result."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__(1)
        self.largest: dict[str, int] = {}
        self.largest_result: dict[str, int] = {}

    def map(self, fn, items, weight=None, desc=""):
        items = list(items)
        _record(self.largest, fn.__name__, items)
        results = super().map(fn, items, weight, desc)
        _record(self.largest_result, fn.__name__, results)
        return results


def _record(largest: dict[str, int], name: str, values: list) -> None:
    for value in values:
        largest[name] = max(largest.get(name, 0), len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))


def tiny_corpus(path: Path, count: int) -> Path:
    rng = random.Random(count)
    words = [f"w{i}" for i in range(300)]
    lines = (json.dumps({"text": " ".join(rng.choices(words, k=12))}) for _ in range(count))
    path.write_text("\n".join(lines) + "\n")
    return path

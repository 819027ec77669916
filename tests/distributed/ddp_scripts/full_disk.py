"""A real preparation whose cache disk is filled just before one step (tests/unit/data/lm/test_full_disk.py).

Run as ``full_disk.py OUT PIPELINE STEP CACHE DATA NUM_PROC``; prints ``DATAERROR <message>`` and
exits 3 when the preparation raises a ``DataError``, ``PREPARED`` when it does not.
"""

import os
import sys
from pathlib import Path

from lightning_order import DataError, OrderedDataModule, OrderedLMDataModule
from lightning_order.pipelines import PIPELINES

pipeline, step, cache, data, num_proc = sys.argv[2:7]  # argv[1]: the output folder
cache = Path(cache)
registry = PIPELINES[pipeline].step_registry()
real = registry[step].fn


def filled_first(ctx, state):
    fd = os.open(cache / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    info = os.statvfs(cache)
    try:
        os.posix_fallocate(fd, 0, max(info.f_bavail * info.f_frsize - 8192, 1))
    finally:
        os.close(fd)
    return real(ctx, state)


registry.replace(step, filled_first)
common = {"data_files": data, "cache_dir": str(cache), "num_proc": int(num_proc)}
if pipeline == "lm":
    dm = OrderedLMDataModule(dataset="json", vocab_size=300, block_size=16, **common)
else:
    dm = OrderedDataModule(dataset="csv", vocab_size=200, max_length=16, **common)
try:
    dm.prepare_data()
except DataError as err:
    print("DATAERROR", err)
    sys.exit(3)
print("PREPARED")

"""The LM steps that write (``encode``, ``pack``, ...) under a full disk: one DataError naming the step, never a SIGBUS.

Each case runs a real preparation in a subprocess (a SIGBUS would kill pytest itself) with its
cache on a small tmpfs, filled just before the step under test by a wrapper around that step:
the step's own writes meet the full disk. ``pack`` used to write its blocks through a memory map
of a sparse file, so a full disk killed the process (or its pool worker) with SIGBUS.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import mounted_tmpfs

from lightning_order.data.lm.corpus import stdlib_corpus

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = """
import os, sys
from pathlib import Path
from lightning_order import DataError, OrderedDataModule, OrderedLMDataModule
from lightning_order.pipelines import PIPELINES

pipeline, step, cache, data, num_proc = sys.argv[1:6]
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
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (root only), which the script fills before the step under test."""
    with mounted_tmpfs(tmp_path / "disk", "16m") as mount:
        yield mount


def _inputs(folder: Path) -> dict[str, Path]:
    jsonl = folder / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in stdlib_corpus(200)))
    table = folder / "rows.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        words = ["good", "bad", "fine", "poor", "nice", "awful", "movie", "plot"]
        for i in range(300):
            writer.writerow([" ".join(words[(i * 7 + j * 3) % 8] for j in range(12)) + f" {i}", i % 2])
    return {"lm": jsonl, "standard": table}


CASES = [
    pytest.param("lm", "load", 2, "work/hf", id="lm-load"),
    pytest.param("lm", "clean", 2, "work", id="lm-clean"),
    pytest.param("lm", "dedup", 2, "work", id="lm-dedup"),
    pytest.param("lm", "encode", 2, "part-00000.npy", id="lm-encode"),
    pytest.param("lm", "pack", 2, "blocks.npy", id="lm-pack-in-workers"),
    pytest.param("lm", "pack", 1, "blocks.npy", id="lm-pack-in-process"),
    pytest.param("standard", "load", 1, "work", id="standard-load"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("pipeline", "step", "num_proc", "named"), CASES)
def test_a_full_disk_is_one_data_error_naming_the_step_the_path_and_the_free_space(
    small_disk: Path, tmp_path: Path, pipeline: str, step: str, num_proc: int, named: str
) -> None:
    data = _inputs(tmp_path)[pipeline]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, pipeline, step, str(small_disk), str(data), str(num_proc)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode != -signal.SIGBUS, "killed by SIGBUS (a write through a sparse memory map)"
    lines = [line for line in done.stdout.splitlines() if line.startswith("DATAERROR")]
    assert done.returncode == 3 and len(lines) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    message = lines[0]
    assert f"[step '{step}']" in message and "no space left on the device" in message
    assert named in message and str(small_disk) in message
    assert "free of 16.0 MiB on that file system" in message
    assert "free space there, or point cache_dir" in message
    assert sorted(p.name for p in small_disk.iterdir() if not p.name.endswith(".lock")) == ["filler"]

"""The LM steps that write (``encode``, ``pack``, ...) under a full disk: one DataError naming the step, never a SIGBUS.

Each case runs a real preparation in a process of its own (``ddp_scripts/full_disk.py``, forked
from the tests' preloaded server: a SIGBUS would kill pytest itself) with its
cache on a small tmpfs, filled just before the step under test by a wrapper around that step:
the step's own writes meet the full disk. ``pack`` used to write its blocks through a memory map
of a sparse file, so a full disk killed the process (or its pool worker) with SIGBUS.
"""

from __future__ import annotations

import csv
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddp_utils import run_side_by_side
from helpers import mounted_tmpfs

from lightning_order.data.lm.corpus import stdlib_corpus

ROOT = Path(__file__).resolve().parents[4]


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
    pytest.param("lm", "load", 2, "work", id="lm-load"),  # the workers write the ranges they read there
    pytest.param("lm", "clean", 2, "work", id="lm-clean"),
    pytest.param("lm", "dedup", 2, "work", id="lm-dedup"),
    pytest.param("lm", "encode", 2, "part-00000.npy", id="lm-encode"),
    pytest.param("lm", "pack", 2, "blocks/", id="lm-pack-in-workers"),
    pytest.param("lm", "pack", 1, "blocks/", id="lm-pack-in-process"),
    pytest.param("standard", "load", 1, "work", id="standard-load"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("pipeline", "step", "num_proc", "named"), CASES)
def test_a_full_disk_is_one_data_error_naming_the_step_the_path_and_the_free_space(
    small_disk: Path, tmp_path: Path, pipeline: str, step: str, num_proc: int, named: str
) -> None:
    data = _inputs(tmp_path)[pipeline]
    args = [pipeline, step, str(small_disk), str(data), str(num_proc)]
    (done,) = run_side_by_side("full_disk.py", [(tmp_path / "out", args)])
    assert done.returncode != -signal.SIGBUS, "killed by SIGBUS (a write through a sparse memory map)"
    lines = [line for line in done.stdout.splitlines() if line.startswith("DATAERROR")]
    assert done.returncode == 3 and len(lines) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    message = lines[0]
    assert f"[step '{step}']" in message and "no space left on the device" in message
    assert named in message and str(small_disk) in message
    assert "free of 16.0 MiB on that file system" in message
    assert "free space there, or point cache_dir" in message
    assert sorted(p.name for p in small_disk.iterdir() if not p.name.endswith(".lock")) == ["filler"]

"""Runs OrderedDataModule.prepare_data in its own process, optionally SIGKILLing itself mid-way.

Usage: python data_prepare.py OUT_DIR CACHE_DIR [KILL_AT]
KILL_AT is a data step (killed right after it ran), ``save`` (after the splits and tokenizer are
written, before the manifest) or ``publish`` (after the manifest, before the atomic rename).
Without KILL_AT, writes OUT_DIR/result.json: the data fingerprints, a digest of every encoded
column of both splits, and whether this process ran the steps (``prepared``).

Usage: python data_prepare.py ROOT --kill-points KILL_AT...
Imports once, then forks one child process per KILL_AT (each ``ROOT/<KILL_AT>`` with its own cache
``ROOT/cache-<KILL_AT>``, its stderr in ``ROOT/<KILL_AT>/stderr.txt``); the children run side by
side and SIGKILL themselves like the single runs above. Once all have ended, runs the
uninterrupted reference itself (``ROOT/ref``, cache ``ROOT/ref-cache``) and writes
``ROOT/killed.json``: each child's return code as ``subprocess`` gives it (``-9`` for SIGKILL).
Most of a fresh process's time is importing; the children skip that, not the kill.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

import datasets
import numpy as np
import xxhash

from lightning_order import OrderedDataModule, StepLedger
from lightning_order.data.engine import cache
from lightning_order.data.text.steps import STEPS


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_after(step: str) -> None:
    """Wraps the registered step function so that the process dies right after the step ran."""
    run = STEPS[step].fn

    def run_then_die(ctx, state):
        result = run(ctx, state)
        _die()
        return result

    STEPS.replace(step, run_then_die)


def prepare(out: Path, root: str, kill_at: str | None) -> None:
    if kill_at == "save":
        StepLedger.save = lambda *a, **k: _die()
    elif kill_at == "publish":
        cache.publish = lambda *a, **k: _die()
    elif kill_at is not None:
        _kill_after(kill_at)
    ran = []
    load = STEPS["load"].fn
    STEPS.replace("load", lambda ctx, state: ran.append(1) or load(ctx, state))
    dm = OrderedDataModule(cache_dir=root, demo_size=1500, vocab_size=300, max_length=16)
    dm.prepare_data()
    digests = {}
    for split in ("train", "val"):
        ds = datasets.load_from_disk(str(dm.cache_path / split)).with_format("numpy")
        for column in ds.column_names:
            digests[f"{split}/{column}"] = xxhash.xxh3_64_hexdigest(
                np.ascontiguousarray(ds[:][column]).tobytes()
            )
    result = {
        "fingerprints": dm.data_fingerprints(),
        "digests": digests,
        "tokenizer": (dm.cache_path / "tokenizer.json").read_text(),
        "cache_key": dm.cache_key,
        "prepared": bool(ran),
    }
    (out / "result.json").write_text(json.dumps(result))


def _child(out: Path, root: str, kill_at: str) -> None:
    """In a forked child: prepare with ``kill_at``; never returns (``os._exit``)."""
    code = 0
    try:
        out.mkdir(parents=True, exist_ok=True)
        stderr = os.open(out / "stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(stderr, 2)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        prepare(out, root, kill_at)  # SIGKILLs this process at kill_at
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def kill_points(root: Path, points: list[str]) -> None:
    children = {}
    for point in points:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(root / point, str(root / f"cache-{point}"), point)
        children[point] = pid
    codes = {}
    for point, pid in children.items():
        _, status = os.waitpid(pid, 0)
        codes[point] = os.waitstatus_to_exitcode(status)  # -N: killed by signal N, as subprocess says
    (root / "ref").mkdir(parents=True, exist_ok=True)
    prepare(root / "ref", str(root / "ref-cache"), None)
    (root / "killed.json").write_text(json.dumps(codes))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[2] == "--kill-points":
        kill_points(Path(sys.argv[1]), sys.argv[3:])
        return
    out, root = Path(sys.argv[1]), sys.argv[2]
    prepare(out, root, sys.argv[3] if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()

"""Runs OrderedDataModule.prepare_data in its own process, optionally SIGKILLing itself mid-way.

Usage: python data_prepare.py OUT_DIR CACHE_DIR [KILL_AT]
KILL_AT is a data step (killed right after it ran), ``save`` (after the splits and tokenizer are
written, before the manifest) or ``publish`` (after the manifest, before the atomic rename).
Without KILL_AT, writes OUT_DIR/result.json: the data fingerprints, a digest of every encoded
column of both splits, and whether this process ran the steps (``prepared``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
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


def main() -> None:
    out, root = Path(sys.argv[1]), sys.argv[2]
    kill_at = sys.argv[3] if len(sys.argv) > 3 else None
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


if __name__ == "__main__":
    main()

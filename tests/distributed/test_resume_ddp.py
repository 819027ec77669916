"""Resuming mid-epoch under real DDP (2 CPU ranks, gloo), and from 2 ranks to 1 with the same global batch.

One DDP launch (tests/distributed/ddp_scripts/resume_ddp.py) runs both DataModules: an
uninterrupted run, then resumes from periodic checkpoints; each rank's per-batch hashes of a resumed
run must be the uninterrupted run's. Then, in this process, the run stopped mid-epoch on 2 ranks ×
B is resumed on 1 rank × 2B: it reads the same global batches, and the epoch sees every block
exactly once. The same in one process: tests/integration/test_resume.py.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ddp_utils import read_json, run_script
from helpers import quiet_trainer
from resumes import BATCH, BatchHashes, datamodule, model, row_hashes

from lightning_order import OrderValidator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory, resume_cache: Path) -> dict[str, Any]:
    # The launch takes about 20 s. Once in 13 runs (the second CI run of issue #42's stop, inside
    # the whole suite; never alone, 0 of 12) it hung until its 500 s limit, and the ranks' output
    # was gone before it could be read. Until that is understood, a launch that outlives 150 s is
    # reported with what each rank printed (a warning in the summary) and run once more.
    for attempt in (1, 2):
        out = tmp_path_factory.mktemp("resume-ddp")
        try:
            run_script("resume_ddp.py", out, str(resume_cache), timeout=150)
            break
        except subprocess.TimeoutExpired:
            printed = {p.name: p.read_text(errors="replace")[-3000:] for p in sorted(out.glob(".rank*"))}
            warnings.warn(
                f"resume_ddp.py launch {attempt} outlived 150 s; the ranks printed: {printed}", stacklevel=2
            )
            if attempt == 2:
                raise
    ranks = [read_json(out / f"rank{r}.json") for r in range(2)]
    return {"out": out, "cache": resume_cache, "ranks": ranks}


@pytest.mark.parametrize("kind", ["standard", "lm"])
def test_every_rank_of_a_resumed_ddp_run_reads_the_batches_of_the_uninterrupted_run(
    launched: dict[str, Any], kind: str
) -> None:
    for rank, result in enumerate(launched["ranks"]):
        run = result[kind]
        steps, reference = run["steps"], run["reference"]
        assert run["rules"] == [] and len(reference) == 2 * steps
        # Stopped mid-epoch, at the epoch's last step and at the next one's first.
        assert set(run["resumed"]) == {"5", str(steps), str(steps + 1)}
        for step, resumed in run["resumed"].items():
            assert resumed["rules"] == [], (rank, step)
            assert resumed["hashes"] == reference[int(step) :], (kind, rank, step)


@pytest.mark.parametrize("kind", ["lm", "standard"])
def test_two_ranks_resumed_on_one_with_the_same_global_batch_see_every_sample_of_the_epoch_once(
    launched: dict[str, Any], kind: str
) -> None:
    out, (rank0, rank1) = launched["out"], (r[kind] for r in launched["ranks"])
    steps, stop = rank0["steps"], 5
    # The DDP run's global batches: rank 0's rows, then rank 1's.
    global_batches = [a + b for a, b in zip(rank0["reference"], rank1["reference"])]
    dm, hashes, validator = (
        datamodule(kind, launched["cache"], batch_size=BATCH[kind]),
        BatchHashes(),
        OrderValidator(),
    )
    trainer = quiet_trainer(out, [validator, hashes], max_epochs=1, limit_val_batches=1)
    trainer.fit(model(kind, dm), dm, ckpt_path=str(out / kind / "ckpt" / f"step={stop}.ckpt"))
    assert validator.violations == []
    assert hashes.hashes() == global_batches[stop:steps]  # the same global position, batch by batch
    epoch = [row for batch in global_batches[:stop] + hashes.hashes() for row in batch]
    assert len(epoch) == dm.shard_info["length"] == steps * BATCH[kind]  # one rank reads the whole epoch
    if kind == "lm":  # the epoch's blocks in reading order, every one once (content may repeat: by position)
        blocks = torch.from_numpy(dm.blocks("train").astype(np.int64))
        assert epoch == row_hashes({"input_ids": blocks[:, :-1], "labels": blocks[:, 1:]})

"""A weighted mixture under real DDP (2 CPU ranks, gloo; tests/distributed/ddp_scripts/mixture_ddp.py).

The ranks' batches laid side by side are the global batches one rank reads with the same global
batch (the draw by weight is a function of the seed and the epoch alone), the validator finds no
violation on either rank, and a run resumed mid-epoch reads exactly the uninterrupted run's batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ddp_utils import read_json, run_script
from helpers import quiet_trainer
from mixtures import mixture_dm, write_sources
from resumes import BatchHashes, model

from lightning_order import OrderValidator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    corpus, cache, out = (tmp_path_factory.mktemp(name) for name in ("corpus", "cache", "ddp"))
    write_sources(corpus)
    mixture_dm(corpus, cache).prepare_data()  # once, before the ranks start
    run_script("mixture_ddp.py", out, str(corpus), str(cache), timeout=500)
    return {"corpus": corpus, "cache": cache, "ranks": [read_json(out / f"rank{r}.json") for r in range(2)]}


def test_both_ranks_serve_the_mixture_at_its_weights_and_resume_exactly(launched: dict[str, Any]) -> None:
    for result in launched["ranks"]:
        reference, resumed = result["reference"], result["resumed"]
        assert reference["rules"] == [] and resumed["rules"] == []
        assert abs(reference["shares"][0] - 0.7) <= 0.01 and abs(reference["shares"][1] - 0.3) <= 0.01
        assert resumed["hashes"] == reference["hashes"][5:]  # no batch replayed or skipped
    assert launched["ranks"][0]["reference"]["shares"] == launched["ranks"][1]["reference"]["shares"]


def test_two_ranks_read_the_global_batches_one_rank_reads(launched: dict[str, Any], tmp_path: Path) -> None:
    rank0, rank1 = (r["reference"]["hashes"] for r in launched["ranks"])
    dm, hashes = mixture_dm(launched["corpus"], launched["cache"], batch_size=128), BatchHashes()
    quiet_trainer(tmp_path, [OrderValidator(), hashes], max_epochs=1, limit_val_batches=0).fit(
        model("lm", dm), dm
    )
    assert hashes.hashes() == [a + b for a, b in zip(rank0, rank1)]

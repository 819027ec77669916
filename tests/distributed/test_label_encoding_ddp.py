"""Label-aware leakage under real DDP (2 CPU ranks, gloo): the ranks' shards are joined and every rank
agrees (tests/distributed/ddp_scripts/label_ddp.py).

The pure check: tests/unit/checks/test_label_encoding.py; one process: tests/integration/test_label_leakage.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ddp_utils import read_json, run_script


@pytest.mark.slow
def test_ddp_shards_are_joined_and_every_rank_agrees(tmp_path: Path) -> None:
    """Three cases in one 2-rank launch: a leak with the validator, a leak with the monitor alone,
    a sound encoding with the validator."""
    run_script("label_ddp.py", tmp_path, timeout=400)
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in range(2)]
    for mode, callbacks in (("leak", "validator"), ("leak", "monitor"), ("sound", "validator")):
        for per_rank in ranks:
            result = per_rank[f"{mode}-{callbacks}"]
            assert result["world_size"] == 2
            rules = [(v["rule"], v["details"].get("kind")) for v in result["violations"]]
            named = [(d["symptom"], d["suspected_rule"]) for d in result["diagnoses"]]
            if mode == "sound":
                assert rules == [] and named == [], (mode, callbacks)
                continue
            if callbacks == "validator":
                assert rules == [("fit-before-split", "label-encoding")]
            # The monitor names it at the first validation (the end of epoch 1), with or without a validator.
            assert named == [("train-val-gap", "fit-before-split")], (mode, callbacks)
            assert result["diagnoses"][0]["step"] == result["steps_per_epoch"]

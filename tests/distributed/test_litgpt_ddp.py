"""litgpt's data modules with zero glue under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/litgpt_ddp.py. The same cases in one process, and the bugs:
tests/integration/test_litgpt.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

pytest.importorskip("litgpt")
pytest.importorskip("litdata")


@pytest.mark.slow
def test_litgpt_pretraining_and_sft_under_ddp_in_one_launch(tmp_path):
    """2 CPU ranks: ``TextFiles`` and ``TinyStories`` on litdata shards and a correct ``JSON`` SFT are
    silent and train (litdata's ``state_dict(args)`` dataset no crash); ``val.json`` equal to
    ``train.json`` and answers cut away by ``max_seq_length`` under ``mask_prompt=False`` are caught on
    both ranks (in warn mode)."""
    run_script("litgpt_ddp.py", tmp_path, timeout=300)
    for rank in range(2):
        result = read_json(tmp_path / f"rank{rank}.json")
        for case in ("TextFiles", "TinyStories", "JSON"):
            assert result[case]["rules"] == [] and result[case]["steps"] == 1, (case, result)
        assert result["JSON val=train"]["rules"] == ["train-val-overlap"], result
        assert result["JSON answers cut"]["rules"] == ["rows-without-target"], result
        assert all(result[case]["rank"] == rank for case in result), result

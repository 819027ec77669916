"""The nanoGPT-style LM pipeline with zero glue under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/lm_zero_glue_ddp.py. The same cases in one process:
tests/integration/test_lm_zero_glue.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script


@pytest.mark.slow
def test_lm_bugs_and_the_correct_pipeline_under_ddp_in_one_launch(tmp_path):
    """2 CPU ranks: the correct pipeline silent; a pad token beyond the model's table, a tokenizer
    trained per rank, blocks without end-of-text and 19 % validation twins each caught on both
    ranks, with no glue (in warn mode; the single-process test shows each stops before step 1)."""
    run_script("lm_zero_glue_ddp.py", tmp_path, timeout=300)
    for rank in range(2):
        result = read_json(tmp_path / f"rank{rank}.json")
        assert result["correct"]["rules"] == [], result
        assert result["pad-added"]["rules"] == ["vocab-changed-after-init"], result
        assert result["per-rank-tokenizer"]["rules"] == ["rank-mismatch"], result
        assert "tokenizer.json" in result["per-rank-tokenizer"]["fix"], result
        assert result["no-eos"]["rules"] == ["pack-without-eos"], result
        assert result["twins"]["rules"] == ["train-val-overlap"], result
        # #37: another block_size on one rank: the field named, its fix, not random_split's.
        assert result["per-rank-block-size"]["rules"] == ["rank-mismatch"], result
        fix = result["per-rank-block-size"]["fix"]
        assert "block_size" in fix and "random_split" not in fix, result
        assert all(result[case]["rank"] == rank for case in result), result

"""Hand-written pipelines under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/handwritten_ddp.py: the DDP order mistakes and the correct pipeline.

The same pipelines in one process: tests/integration/test_handwritten_pipelines.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script


@pytest.mark.slow
def test_ddp_mistakes_and_the_correct_pipeline_in_one_launch(tmp_path):
    """2 CPU ranks: the correct pipeline silent under both namespaces; random_split without a
    generator is rank-mismatch and per-rank statistics shard-before-normalize, with no glue."""
    run_script("handwritten_ddp.py", tmp_path, timeout=400)
    for rank in range(2):
        result = read_json(tmp_path / f"rank{rank}.json")
        assert result["correct-pytorch_lightning"]["rules"] == [], result
        assert result["correct-lightning.pytorch"]["rules"] == [], result
        assert result["correct-pytorch_lightning"]["global_step"] == 2
        assert "rank-mismatch" in result["random-split"]["rules"], result
        assert "ranks 0 and 1 hold different validation sets" in result["random-split"]["messages"]
        assert result["per-rank-stats"]["rules"] == ["shard-before-normalize"], result
        assert "'numeric'" in result["per-rank-stats"]["messages"]
        assert result["glue"] == {"random-split": 0, "per-rank-stats": 0}

"""The LM order-error lab (``benchmarks/lm_lab.py``) in real DDP: a per-rank tokenizer is caught before step 1.

The lab's pure parts and its tiny single-process run: tests/benchmarks/test_lm_lab.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import run_ranks_preloaded
from helpers import load_benchmark

lab = load_benchmark("lm_lab")


@pytest.mark.slow
def test_per_rank_tokenizer_is_caught_before_step_1_in_real_ddp(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "run_ranks", run_ranks_preloaded)  # its 2 ranks forked, imports done
    cfg = lab.LabConfig.tiny()
    corpus = lab.build_lab_corpus(cfg, tmp_path / "corpus")
    seen = lab.detect_per_rank_ddp(cfg, corpus, str(tmp_path / "ddp"))
    assert seen.get("error") is None, seen.get("error")
    assert "rank-mismatch" in seen["validator_rules"]
    assert seen["validator_before_step_1"]
    assert "different tokenizer" in seen["first_warning"]

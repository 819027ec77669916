"""Issue #37's pipeline shapes under real DDP (2 CPU ranks, gloo), in one launch of
tests/distributed/ddp_scripts/zero_glue_matrix_ddp.py; the whole table in one process:
tests/integration/test_zero_glue_matrix.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script

#: Each case of the launch and the rule codes it must raise (none for the correct pipelines).
EXPECTED = {
    "A": [],
    "B": [],
    "C": [],
    "eos-label-masked-A": ["eos-label-masked"],
    "bos-on-train-only-C": ["bos-mismatch"],
    "truncated-A": ["documents-truncated"],
    "padded-without-eos-C": ["documents-without-eos"],
    "seed-rank-A": ["ranks-read-same-data"],
    "all-data-A": ["ranks-read-same-data"],
    "seed-rank-B": ["ranks-read-same-data"],
    "all-data-B": ["ranks-read-same-data"],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Both ranks' results of one launch."""
    out = tmp_path_factory.mktemp("matrix-ddp")
    run_script("zero_glue_matrix_ddp.py", out, timeout=400)
    return [read_json(out / f"rank{rank}.json") for rank in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_shape_under_ddp_silent_or_caught_on_both_ranks(results, case):
    for rank, result in enumerate(results):
        assert result[case]["rules"] == EXPECTED[case], result
        assert result[case]["rank"] == rank

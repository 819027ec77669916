"""Issue #47 item 1 under DDP: ``OrderGuard`` in a Fabric loop with ``strategy="ddp"`` and in a plain loop
with torch's ``DistributedDataParallel`` (2 CPU ranks, gloo), every planted bug and the correct run in one
launch of tests/distributed/ddp_scripts/order_guard_fabric_ddp.py. The same cases in one process:
tests/integration/test_order_guard.py.
"""

from __future__ import annotations

import pytest
from ddp_utils import read_json, run_script
from plain_loop import BUGS


@pytest.mark.slow
def test_every_rank_raises_the_same_error_before_any_optimizer_step(tmp_path):
    """Each bug stops both ranks with the same rule, weights unchanged, no rank left in a collective
    (the launch finishes: the next case runs on the same process group); the correct run trains."""
    run_script("order_guard_fabric_ddp.py", tmp_path, timeout=300)
    ranks = [read_json(tmp_path / f"rank{rank}.json") for rank in range(2)]
    for rank, result in enumerate(ranks):
        assert all(case["rank"] == rank and case["world"] == 2 for case in result.values()), result
        correct = result["correct"]
        assert correct["rules"] == [] and not correct["unchanged"], correct
        assert len(correct["losses"]) == 6 and correct["losses"][-1] < correct["losses"][0], correct
        for bug in BUGS:
            assert result[bug]["rules"][0] == bug and result[bug]["unchanged"], (bug, result[bug])
        plain = result["plain-correct"]
        assert plain["rules"] == [] and len(plain["losses"]) == 6 and not plain["unchanged"], plain
        for bug in ("labels-shifted-twice", "train-val-overlap"):
            case = result[f"plain-{bug}"]
            assert case["rules"][0] == bug and case["unchanged"], (bug, case)
    assert all(ranks[0][case]["rules"] == ranks[1][case]["rules"] for case in ranks[0]), ranks

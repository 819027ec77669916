"""``OrderGuard`` under Fabric's DDP strategy (2 CPU ranks, gloo): every planted bug and the correct run, one launch.

Run by tests/distributed/test_order_guard_ddp.py as ``python order_guard_fabric_ddp.py OUT`` once
per rank. Each case builds ``examples/plain_loop.py``'s run and trains it in
``examples/fabric_loop.py``'s loop; what each rank saw goes to ``OUT/rank{N}.json``: the rules it
raised, whether its weights were unchanged, the losses of a run that trained.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import fabric_loop
import plain_loop
import torch
from lightning.fabric import Fabric

from lightning_order import OrderError


def main() -> None:
    out = Path(sys.argv[1])
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    result = {}
    for bug in (None, *plain_loop.BUGS):
        run = plain_loop.build(bug)
        before = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        case: dict = {"rank": fabric.global_rank, "world": fabric.world_size}
        try:
            case["losses"] = fabric_loop.train(fabric, run, steps=6)
            case["rules"] = []
        except OrderError as err:
            case["rules"] = err.rules
        case["unchanged"] = all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())
        result[bug or "correct"] = case
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()

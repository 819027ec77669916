"""``OrderGuard`` under Fabric's DDP strategy and a plain ``torch.distributed`` loop (2 CPU ranks, gloo), one launch.

Run by tests/distributed/test_order_guard_ddp.py as ``python order_guard_fabric_ddp.py OUT`` once
per rank. Each case builds ``examples/plain_loop.py``'s run and trains it in
``examples/fabric_loop.py``'s loop (every planted bug and the correct run), then in the plain loop
with torch's own ``DistributedDataParallel`` and ``DistributedSampler`` on the process group Fabric
started (``plain-`` cases); what each rank saw goes to ``OUT/rank{N}.json``: the rules it raised,
whether its weights were unchanged, the losses of a run that trained.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import fabric_loop
import plain_loop
import torch
from lightning.fabric import Fabric
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from lightning_order import OrderError, OrderGuard


def _plain_ddp(run: plain_loop.Run) -> list[float]:
    """The plain loop as torch's DDP tutorial writes it: a DistributedSampler and a DDP-wrapped model."""
    dataset = run.train_loader.dataset
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, seed=0), drop_last=True)
    ddp = dataclasses.replace(run, model=DistributedDataParallel(run.model), train_loader=loader)
    guard = OrderGuard(ddp.model, loader, run.val_loader, tokenizer=run.tokenizer)
    return plain_loop.train(ddp, 6, guard)


def main() -> None:
    out = Path(sys.argv[1])
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    result = {}
    cases = [("fabric", bug) for bug in (None, *plain_loop.BUGS)]
    cases += [("plain", bug) for bug in (None, "labels-shifted-twice", "train-val-overlap")]
    for loop, bug in cases:
        run = plain_loop.build(bug)
        before = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        case: dict = {"rank": fabric.global_rank, "world": fabric.world_size}
        try:
            case["losses"] = fabric_loop.train(fabric, run, steps=6) if loop == "fabric" else _plain_ddp(run)
            case["rules"] = []
        except OrderError as err:
            case["rules"] = err.rules
        case["unchanged"] = all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())
        result[("plain-" if loop == "plain" else "") + (bug or "correct")] = case
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()

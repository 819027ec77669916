"""A litgpt-style Lightning Fabric loop with ``OrderGuard``: the same proofs under Fabric's strategies.

The data, tokenizer and model are :mod:`plain_loop`'s (``examples/`` on the import path); what
changes is the loop, written as litgpt writes its pretraining loop: ``fabric.setup`` the model and
optimizer, ``fabric.setup_dataloaders`` the loaders (under DDP each rank gets its share through
the distributed sampler Fabric injects), ``fabric.backward(loss)``. The guard takes what Fabric
returns; under DDP every rank raises the same error before the first ``optimizer.step()``.

Run it::

    python examples/fabric_loop.py                                     # one process, trains, silent
    python examples/fabric_loop.py --devices 2 --strategy ddp          # two CPU processes (gloo)
    python examples/fabric_loop.py --bug eos-label-masked              # OrderError before step 1's optimizer step
"""

from __future__ import annotations

import argparse

from lightning.fabric import Fabric
from plain_loop import BUGS, Run, build

from lightning_order import OrderGuard


def train(fabric: Fabric, run: Run, steps: int = 20, guarded: bool = True) -> list[float]:
    """litgpt's loop shape: ``steps`` optimizer steps on what ``fabric`` set up; the guard wraps each step.

    Args:
        fabric: the launched Fabric.
        run: the model, loaders, tokenizer and optimizer (:func:`plain_loop.build`).
        steps: optimizer steps.
        guarded: wrap the steps in an :class:`~lightning_order.OrderGuard` (``False``: the same loop bare).
    """
    model, optimizer = fabric.setup(run.model, run.optimizer)
    train_loader, val_loader = fabric.setup_dataloaders(run.train_loader, run.val_loader)
    guard = OrderGuard(model, train_loader, val_loader, tokenizer=run.tokenizer) if guarded else None
    losses: list[float] = []
    model.train()
    while len(losses) < steps:
        for x, y in train_loader:
            if guard is not None:
                with guard.step():
                    _, loss = model(x, y)
                    fabric.backward(loss)
            else:
                _, loss = model(x, y)
                fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def main(argv: list[str] | None = None) -> None:
    """Launches Fabric on CPU (``--devices``, ``--strategy``), builds the run (``--bug`` plants one) and trains."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", choices=BUGS, default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    args = parser.parse_args(argv)
    fabric = Fabric(accelerator="cpu", devices=args.devices, strategy=args.strategy)
    fabric.launch()
    losses = train(fabric, build(args.bug), args.steps)
    fabric.print(f"trained {len(losses)} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()

"""Issue #47 item 1: ``OrderGuard`` in a nanoGPT-style plain loop and a litgpt-style Fabric loop.

The same table of planted bugs in both loops (``examples/plain_loop.py``, ``examples/fabric_loop.py``;
real text: standard-library docstrings), each stopped before the first ``optimizer.step()`` with
the rule the Lightning callback gives and the weights as they were; the correct run is silent and
trains. Then the guard's own contract: after step 1 ``guard.step()`` is one shared no-op, a failed
step leaves no hook behind, warn mode warns and trains. Fabric's DDP launch is
tests/distributed/test_order_guard_ddp.py.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import fabric_loop
import plain_loop
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from lightning.fabric import Fabric

from lightning_order import OrderError, OrderGuard, OrderValidator, OrderWarning

#: Each planted bug and the rule it must raise (the callback's codes).
TABLE = [(bug, bug) for bug in plain_loop.BUGS]


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _unchanged(before: dict[str, torch.Tensor], model: torch.nn.Module) -> bool:
    return all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def _plain(run: plain_loop.Run, steps: int) -> list[float]:
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    return plain_loop.train(run, steps, guard)


def _fabric(run: plain_loop.Run, steps: int) -> list[float]:
    fabric = Fabric(accelerator="cpu", devices=1)
    return fabric_loop.train(fabric, run, steps)


class _Module(pl.LightningModule):
    """The same model in a LightningModule, for the Lightning Trainer row of the table."""

    def __init__(self, run: plain_loop.Run) -> None:
        super().__init__()
        self.model, self.run = run.model, run

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.model(*batch)[1]

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.model(*batch)[1]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.run.optimizer


class _Data(pl.LightningDataModule):
    """The same loaders and tokenizer as a (zero-glue) datamodule."""

    def __init__(self, run: plain_loop.Run) -> None:
        super().__init__()
        self.run, self.tokenizer = run, run.tokenizer

    def train_dataloader(self) -> Any:
        return self.run.train_loader

    def val_dataloader(self) -> Any:
        return self.run.val_loader


def _lightning(run: plain_loop.Run, steps: int) -> list[float]:
    trainer = quiet_trainer(max_steps=steps, callbacks=[OrderValidator()], limit_val_batches=0)
    trainer.fit(_Module(run), datamodule=_Data(run))
    return [0.0] * int(trainer.global_step)


LOOPS = {"plain": _plain, "fabric": _fabric, "lightning": _lightning}


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize(("bug", "rule"), TABLE)
def test_planted_bug_stops_before_any_optimizer_step(loop: str, bug: str, rule: str) -> None:
    run = plain_loop.build(bug)
    before = _state(run.model)
    with pytest.raises(OrderError) as err:
        LOOPS[loop](run, 3)
    assert rule in err.value.rules
    assert err.value.rules[0] == rule  # the planted bug is what the report leads with
    assert _unchanged(before, run.model), "a weight moved before the error"
    assert run.optimizer.state_dict()["state"] == {}  # AdamW never stepped


@pytest.mark.parametrize(("bug", "rule"), TABLE)
def test_the_guard_words_each_finding_as_the_callback_does(bug: str, rule: str) -> None:
    """The same violations, message for message, from ``OrderGuard`` in a plain loop and from
    ``OrderValidator`` in a Lightning Trainer on the same data and model."""
    found = {}
    for loop in ("plain", "lightning"):
        with pytest.raises(OrderError) as err:
            LOOPS[loop](plain_loop.build(bug), 3)
        found[loop] = [(v.rule, v.describe()) for v in err.value.violations]
    assert found["plain"] == found["lightning"]


@pytest.mark.parametrize("loop", ["plain", "fabric"])
def test_correct_run_is_silent_and_trains(loop: str) -> None:
    run = plain_loop.build(None)
    before = _state(run.model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        losses = LOOPS[loop](run, 12)
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3])
    assert not _unchanged(before, run.model)


def test_after_step_one_step_is_a_shared_no_op() -> None:
    run = plain_loop.build(None)
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    plain_loop.train(run, 1, guard)
    assert guard.checked and guard.violations == []
    assert guard.step() is guard.step()  # nothing allocated per step
    calls = 100_000
    start = time.perf_counter()
    for _ in range(calls):
        with guard.step():
            pass
    per_step = (time.perf_counter() - start) / calls
    assert per_step < 20e-6, f"{per_step * 1e6:.2f} µs per guard.step() after step 1"


def test_failed_first_step_leaves_no_hook_and_is_not_judged() -> None:
    run = plain_loop.build("labels-shifted-twice")
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    x, y = next(iter(run.train_loader))
    with pytest.raises(ZeroDivisionError), guard.step():
        run.model(x, y)[1].backward()
        raise ZeroDivisionError  # the user's step fails: their error, not a verdict
    assert torch.nn.functional.cross_entropy.__module__ == "torch.nn.functional"
    assert guard.checked and all(not m._forward_pre_hooks for m in run.model.modules())


def test_warn_mode_warns_and_trains() -> None:
    run = plain_loop.build("labels-shifted-twice")
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer, on_violation="warn")
    with pytest.warns(OrderWarning, match="labels-shifted-twice"):
        losses = plain_loop.train(run, 3, guard)
    assert len(losses) == 3 and [v.rule for v in guard.violations] == ["labels-shifted-twice"]


def test_bad_arguments_are_refused() -> None:
    run = plain_loop.build(None)
    with pytest.raises(ValueError, match="on_violation"):
        OrderGuard(run.model, run.train_loader, on_violation="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="train loader"):
        OrderGuard(run.model, None)


def _check_before_loop(run: plain_loop.Run) -> Any:
    guard = OrderGuard(run.model, run.train_loader, run.val_loader, tokenizer=run.tokenizer)
    guard.check()
    return guard


def test_check_before_the_loop_stops_a_leak_before_any_batch_is_drawn() -> None:
    run = plain_loop.build("train-val-overlap")
    with pytest.raises(OrderError) as err:
        _check_before_loop(run)
    assert err.value.rules == ["train-val-overlap"]

"""``OrderGuard``: the validator's proofs in a training loop of your own (plain PyTorch, Fabric).

``OrderValidator`` is a Lightning callback. A loop without a Lightning Trainer (nanoGPT, torchtitan,
litgpt's Fabric loops) wraps its first step instead::

    guard = OrderGuard(model, train_loader, val_loader, tokenizer=tokenizer)
    for x, y in train_loader:
        with guard.step():
            loss = model(x, y)
            loss.backward()  # or fabric.backward(loss)
        optimizer.step()

The first ``guard.step()`` runs what the callback checks before step 1 (the loaders' overlap, the
LM checks on sampled batches, the model's dims against the data's), observes the forward and
backward inside the block, and on leaving it raises :class:`~lightning_order.errors.OrderError`
with the callback's rule codes and messages, before the caller's ``optimizer.step()``: the weights
are as they were. Under ``torch.distributed`` (a plain process group, Fabric's DDP) every verdict
is agreed across ranks, so every rank raises the same error and none is left in a collective.
After step 1, ``guard.step()`` is a flag check that returns a shared no-op context.

Trade-off: the checks that read a Lightning Trainer's own state (resuming from its checkpoints,
the loader states it restores, the ledger it records into) do not run; a loop's resume is its
own. The validator's core imports no Lightning and no ``transformers``: a plain loop that is
checked and trains loads neither ``pytorch_lightning``, ``lightning.fabric`` nor ``transformers``
(``tests/integration/test_hf_trainer.py``).
"""

from __future__ import annotations

import contextlib
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from lightning_order.checks.report import merge_violations
from lightning_order.errors import OrderWarning
from lightning_order.loops import adapter
from lightning_order.rules import Violation

if TYPE_CHECKING:
    from torch import nn

    from lightning_order.loops.adapter import PreStep, RunView

__all__ = ["OrderGuard"]

#: The no-op context every ``guard.step()`` after the first returns (one shared object: nothing allocated).
_DONE = contextlib.nullcontext()


class OrderGuard:
    """Proves the data order in a loop of your own: checks before step 1 and on step 1, raises before its optimizer step.

    Examples:
        >>> guard = OrderGuard(model, train_loader, val_loader, tokenizer=tokenizer)  # doctest: +SKIP
        >>> for x, y in train_loader:  # doctest: +SKIP
        ...     with guard.step():
        ...         model(x, y).backward()
        ...     optimizer.step()

    Args:
        model: the model trained (a Fabric- or DDP-wrapped one too).
        train_loader: the loader the loop iterates (a Fabric-wrapped one too: its sampler is read).
        val_loader: the validation loader, or ``None`` (no overlap check then).
        datamodule: a datamodule the loaders come from (an ``OrderedLMDataModule``: its ledger,
            dims and fingerprints are judged as the callback judges them), or ``None``.
        tokenizer: the tokenizer the data was encoded with, for loaders without a datamodule (its
            end-of-text, start and pad ids and its size decide the token rules).
        on_violation: ``"raise"`` an :class:`~lightning_order.errors.OrderError` (on every rank), or
            ``"warn"`` with an :class:`~lightning_order.errors.OrderWarning` and carry on.
        planned_hours: how long the run is planned to train, for the waste estimate.
        gpu_hour_price: the price of one device-hour, for the waste estimate.
        sample_rows: rows sampled per rank (as ``OrderValidator``'s).
        overlap_max_rows: key hashes compared per split at most (as ``OrderValidator``'s).
        overlap_threshold: the largest share of validation rows with an identical train twin that
            passes (as ``OrderValidator``'s); ``1.0`` turns the check off.
        whole_rows: splits up to this many items are hashed whole (as ``OrderValidator``'s).
        label_check_rows: rows per split read for the label-encoding check (as ``OrderValidator``'s).

    Attributes:
        violations: what the checks found (also in warn mode), identical on every rank.
        sampled_warnings: what sampled batches suggested and step 1 did not decide (warned only).
        checked: whether step 1 was judged (``guard.step()`` is then a no-op).
    """

    def __init__(
        self,
        model: nn.Module,
        train_loader: Any,
        val_loader: Any = None,
        datamodule: Any = None,
        *,
        tokenizer: Any = None,
        on_violation: Literal["raise", "warn"] = "raise",
        planned_hours: float | None = None,
        gpu_hour_price: float | None = None,
        sample_rows: int = 512,
        overlap_max_rows: int = 262_144,
        overlap_threshold: float = 0.01,
        whole_rows: int = 20_000,
        label_check_rows: int = 100_000,
    ) -> None:
        if on_violation not in ("raise", "warn"):
            raise ValueError(f"on_violation must be 'raise' or 'warn', got {on_violation!r}")
        if sample_rows < 1 or overlap_max_rows < 1 or whole_rows < 0 or label_check_rows < 0:
            raise ValueError(
                "sample_rows and overlap_max_rows must be at least 1, whole_rows and label_check_rows at "
                f"least 0; got {sample_rows}, {overlap_max_rows}, {whole_rows}, {label_check_rows}"
            )
        if not 0.0 <= overlap_threshold <= 1.0:
            raise ValueError(f"overlap_threshold must be in [0, 1], got {overlap_threshold}")
        if train_loader is None:
            raise ValueError("OrderGuard needs the train loader the loop iterates, got None")
        self.model, self.train_loader, self.val_loader = model, train_loader, val_loader
        self.datamodule, self.tokenizer, self.on_violation = datamodule, tokenizer, on_violation
        self.planned_hours, self.gpu_hour_price = planned_hours, gpu_hour_price
        self.settings = {
            "sample_rows": sample_rows,
            "overlap_max_rows": overlap_max_rows,
            "overlap_threshold": overlap_threshold,
            "whole_rows": whole_rows,
            "label_check_rows": label_check_rows,
        }
        self.violations: list[Violation] = []
        self.sampled_warnings: list[Violation] = []
        self.checked = False
        self._pre: PreStep | None = None
        self._view: RunView | None = None
        self._observer: Any = None

    # -- the public steps ----------------------------------------------------------------------
    def check(self) -> None:
        """Runs the checks before step 1 now (once; the first :meth:`step` calls it otherwise).

        Call it before the loop to check the loaders before their first batch is drawn. Collective
        under ``torch.distributed``: every rank calls it.

        Raises:
            OrderError: something is wrong (``on_violation="raise"``, or a fatal check).
        """
        self._pre_step()

    def step(self) -> contextlib.AbstractContextManager[Any]:
        """A context for one training step's forward and backward; the first one is watched and judged.

        On leaving the first block without an exception, step 1 is judged (collective under
        ``torch.distributed``) and an :class:`~lightning_order.errors.OrderError` raised before
        the caller's ``optimizer.step()``. An exception inside the block propagates unjudged (the
        observer removed). Every later call returns a shared no-op context.
        """
        if self.checked:
            return _DONE
        return _FirstStep(self)

    def watch_step(self) -> None:
        """Runs :meth:`check` and installs the step-1 observer (hooks on the token embedding,
        ``F.cross_entropy`` wrapped); :meth:`judge_step` judges what it saw.

        For loops whose step is not one Python block (a ``transformers`` Trainer's hooks); a loop of
        your own uses :meth:`step`. Collective under ``torch.distributed``.
        """
        self.check()
        if self.checked or self._observer is not None:
            return
        self._observer = adapter.step_one_observer(self.model, on_overflow=self._overflow)
        self._observer.install()

    def judge_step(self) -> None:
        """Judges step 1 from what the observer saw (once), before its optimizer step; removes the observer.

        Sampled guesses that step 1 did not decide are warned. Collective under ``torch.distributed``:
        every rank reaches it at the same point of the same step.

        Raises:
            OrderError: step 1 shows a violation (``on_violation="raise"``).
        """
        if self.checked:
            return
        self.checked = True
        observer, self._observer = self._observer, None
        pre = self._pre_step()
        view = self._view
        assert view is not None  # set by _pre_step
        found, unproven = adapter.judge_first_step(view, observer, pre.facts, pre.guesses)
        self.sampled_warnings = unproven
        adapter.warn_unproven(view, unproven, "OrderGuard")
        self._act(found, "OrderGuard (step 1, before its optimizer step)")

    def stop_watching(self) -> None:
        """Removes the observer without judging (the step failed): nothing is watched any more."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.remove()
        self.checked = True

    # -- helpers ---------------------------------------------------------------------------------
    def _pre_step(self) -> PreStep:
        """What the checks before step 1 found (run on the first call; raises or warns then)."""
        if self._pre is not None:
            return self._pre
        self._view = view = adapter.run_view(
            self.model, self.train_loader, self.val_loader, self.datamodule, self.tokenizer
        )
        pre: PreStep = adapter.checks_before_step_one(view, self.settings)
        self._pre = pre
        self._act(pre.violations, "OrderGuard (before step 1)", fatal=pre.fatal)
        return pre

    def _act(self, violations: list[Violation], where: str, fatal: bool = False) -> None:
        """Raises (``fatal`` always) or warns on rank 0, with the callback's report."""
        self.violations = merge_violations(self.violations, violations)
        if not violations:
            return
        view = self._view
        assert view is not None  # every finding comes after _pre_step built the view
        error = adapter.report_error(
            violations, view, where, planned_hours=self.planned_hours, gpu_hour_price=self.gpu_hour_price
        )
        if self.on_violation == "raise" or fatal:
            self.stop_watching()  # stopped: nothing more to watch
            raise error
        if view.is_global_zero:
            warnings.warn(str(error), OrderWarning, stacklevel=3)

    def _overflow(self, step: Any) -> None:
        """An id beyond the token embedding: reported before the embedding fails on it (inside the
        forward, so no all-gather, as the callback's; every rank that sees it raises)."""
        self.stop_watching()
        where = "OrderGuard (step 1, entering the token embedding)"
        self._act(adapter.overflow_violations(step), where, fatal=True)


class _FirstStep:
    """The context of the first ``guard.step()``: checks, installs the observer, judges on exit."""

    def __init__(self, guard: OrderGuard) -> None:
        self.guard = guard

    def __enter__(self) -> _FirstStep:
        self.guard.watch_step()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:  # the step failed (or the overflow report stopped it): nothing to judge
            self.guard.stop_watching()
            return
        self.guard.judge_step()

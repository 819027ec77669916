"""``OrderCallback``: the validator's proofs in the Hugging Face ``Trainer``, before its first optimizer step.

The ``Trainer`` hands every callback its model, its train loader and its tokenizer
(``processing_class``); the callback builds an :class:`~lightning_order.guard.OrderGuard` from
them at ``on_train_begin`` and runs its checks there (the loaders' overlap, the LM checks on
sampled batches, the model's rows against the tokenizer), installs the step-1 observer at
``on_step_begin`` of step 0 and judges at ``on_pre_optimizer_step``, so an
:class:`~lightning_order.errors.OrderError` stops the run before the first optimizer step, with
the same rule codes and messages as ``OrderValidator``. It catches the bugs of fine-tuning runs:
``DataCollatorForLanguageModeling(mlm=False)`` with ``pad_token = eos_token`` (every end-of-text
label masked, ``eos-label-masked``), pre-shifted labels (``labels-shifted-twice``), a validation set
drawn from train (``train-val-overlap``).

Trade-offs: the ``Trainer`` hands callbacks an evaluation loader only while it evaluates, so the
validation set is passed to the callback (``eval_dataset=``) for the overlap check. A run resumed
from a checkpoint (``global_step > 0`` at the start) has no step 1 to watch: only the checks before
it run. ``transformers`` is imported here and nowhere else in the package.
"""

from __future__ import annotations

from typing import Any, Literal

from torch.utils.data import DataLoader, Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightning_order.guard import OrderGuard
from lightning_order.rules import Violation

__all__ = ["OrderCallback"]


class OrderCallback(TrainerCallback):
    """Proves the data order of a ``transformers`` ``Trainer`` run before its first optimizer step.

    Examples:
        >>> trainer = Trainer(model, args, train_dataset=train, eval_dataset=val, data_collator=collator,
        ...                   callbacks=[OrderCallback(eval_dataset=val)])  # doctest: +SKIP

    Args:
        eval_dataset: the validation set (a dataset, read through the train loader's collator, or a
            ``DataLoader``), for the overlap check; ``None``: the Trainer's evaluation loader where it
            hands one, else no overlap check.
        on_violation: ``"raise"`` an :class:`~lightning_order.errors.OrderError` (the run stops before
            its first optimizer step), or ``"warn"`` with an :class:`~lightning_order.errors.OrderWarning`.
        tokenizer: the tokenizer, when the Trainer has none (``processing_class``) to hand over.
        **guard_options: more :class:`~lightning_order.guard.OrderGuard` options (``sample_rows``,
            ``overlap_threshold``, ``planned_hours``, ...).

    Attributes:
        guard: the run's :class:`~lightning_order.guard.OrderGuard` (from ``on_train_begin``), or ``None``.
    """

    def __init__(
        self,
        eval_dataset: Dataset | DataLoader | None = None,
        *,
        on_violation: Literal["raise", "warn"] = "raise",
        tokenizer: Any = None,
        **guard_options: Any,
    ) -> None:
        if on_violation not in ("raise", "warn"):
            raise ValueError(f"on_violation must be 'raise' or 'warn', got {on_violation!r}")
        self.eval_dataset, self.on_violation, self.tokenizer = eval_dataset, on_violation, tokenizer
        self.guard_options = guard_options
        self.guard: OrderGuard | None = None

    @property
    def violations(self) -> list[Violation]:
        """What the checks found (also in warn mode); empty before the run starts."""
        return list(self.guard.violations) if self.guard is not None else []

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Builds the guard from what the Trainer hands over and runs the checks before step 1."""
        train_loader = kwargs.get("train_dataloader")
        if train_loader is None:
            return  # nothing to read (a Trainer that hands no loader over): no check
        tokenizer = self.tokenizer or kwargs.get("processing_class") or kwargs.get("tokenizer")
        self.guard = OrderGuard(
            kwargs["model"],
            train_loader,
            self._eval_loader(args, train_loader, kwargs.get("eval_dataloader")),
            tokenizer=tokenizer,
            on_violation=self.on_violation,
            **self.guard_options,
        )
        self.guard.check()
        if state.global_step > 0:  # resumed: step 1 was long ago
            self.guard.stop_watching()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Installs the step-1 observer at the first step (a flag check afterwards)."""
        if self.guard is not None and not self.guard.checked:
            self.guard.watch_step()

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Judges step 1 before its optimizer step (raises there)."""
        if self.guard is not None and not self.guard.checked:
            self.guard.judge_step()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Removes the observer if the run ended before step 1's optimizer step."""
        if self.guard is not None:
            self.guard.stop_watching()

    def _eval_loader(self, args: TrainingArguments, train_loader: Any, handed: Any) -> Any:
        """The validation loader: the one given, a loader over the dataset given, or the Trainer's."""
        given = self.eval_dataset
        if given is None or isinstance(given, DataLoader):
            return given if given is not None else handed
        collate = getattr(train_loader, "collate_fn", None)
        return DataLoader(given, batch_size=args.per_device_eval_batch_size, collate_fn=collate)

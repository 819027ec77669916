"""Which per-batch hooks Lightning calls on a callback: only those the callback implements.

Lightning dispatches every hook to every callback in the list whose attribute of that name is
callable, opening a profiler span for each (``[Callback]<state_key>.<hook>``): six hooks per
training step, about 10 µs a step for a callback that implements none of them (1.75 µs a hook,
measured in ``benchmarks/bench_callbacks_step.py``), more than the monitor's own per-step work. A
per-batch hook that a callback leaves to Lightning's no-op is set to ``None`` on the instance, so
Lightning skips it (``_call_callback_hooks`` calls only what is callable, in both
``pytorch_lightning`` and ``lightning.pytorch``). Only the per-batch hooks: they are always
dispatched that way, whereas the checkpoint hooks are called directly. A hook needed only for a
while (the validator's step-1 watch) is skipped once done with :func:`stop_calling` and called
again from the next fit with :func:`resume_calling`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BATCH_HOOKS", "resume_calling", "skip_unused_batch_hooks", "stop_calling"]

#: The hooks Lightning dispatches to the callbacks at every batch (training, validation, test, predict).
BATCH_HOOKS: tuple[str, ...] = (
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)
#: The packages whose ``Callback`` hooks are no-ops (both namespaces of Lightning).
_LIGHTNING = ("pytorch_lightning", "lightning")


def skip_unused_batch_hooks(callback: Any) -> tuple[str, ...]:
    """Sets each per-batch hook that ``callback``'s class does not implement to ``None`` on the instance.

    A hook a subclass implements (a user's subclass included) is kept: the class that defines
    it, first in the method resolution order, is not Lightning's ``Callback``.

    Returns:
        The hooks Lightning will skip for this callback.
    """
    skipped = []
    for name in BATCH_HOOKS:
        owner = next((k for k in type(callback).__mro__ if name in vars(k)), None)
        if owner is None or owner.__module__.split(".")[0] in _LIGHTNING:
            setattr(callback, name, None)
            skipped.append(name)
    return tuple(skipped)


def stop_calling(callback: Any, *hooks: str) -> None:
    """Lightning skips ``hooks`` of ``callback`` from now on (e.g. a hook needed on step 1 only).

    Raises:
        ValueError: a name is no per-batch hook (the others are called directly, not skipped).
    """
    unknown = [h for h in hooks if h not in BATCH_HOOKS]
    if unknown:
        raise ValueError(f"{unknown} are no per-batch hooks; expected some of {', '.join(BATCH_HOOKS)}")
    for name in hooks:
        setattr(callback, name, None)


def resume_calling(callback: Any, *hooks: str) -> None:
    """Lightning calls ``hooks`` of ``callback`` again (its class's methods), after :func:`stop_calling`."""
    for name in hooks:
        callback.__dict__.pop(name, None)

"""Can this run's train loaders take the loader states the checkpoint holds?

Lightning saves the state of every stateful train loader (``state_dict``/``load_state_dict``) in
``loops.fit_loop.state_dict.combined_loader`` and, on resume, hands them back one for one. A run
resumed with a plain ``DataLoader`` where the checkpoint's run had a resumable one stops in
Lightning's ``setup_data`` with "The CombinedLoader has 0 stateful loaders, but found 1 states",
after the weights are restored and with no word on the data position. :func:`check_loader_states`
says it first (``resume-position``), with the position the checkpoint stopped at and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning_order.positions import TrainPosition
from lightning_order.rules import Violation

__all__ = ["check_loader_states", "stored_loader_states"]


def stored_loader_states(checkpoint: Mapping[str, Any]) -> list[Any]:
    """The train loader states Lightning saved in ``checkpoint`` (one per stateful loader; often none)."""
    loops = checkpoint.get("loops")
    fit_loop = loops.get("fit_loop") if isinstance(loops, Mapping) else None
    state = fit_loop.get("state_dict") if isinstance(fit_loop, Mapping) else None
    states = state.get("combined_loader") if isinstance(state, Mapping) else None
    return list(states) if isinstance(states, (list, tuple)) else []


def _where(states: Sequence[Any]) -> str:
    """Where the checkpoint's loader stood, when its state is a position of ours."""
    for state in states:
        try:
            position = TrainPosition.from_dict(state)
        except ValueError:  # a damaged position: the restore itself names it
            position = None
        if position is not None:
            return f" (a ResumableLoader at sample {position.samples} of epoch {position.epoch})"
    return ""


def check_loader_states(states: Sequence[Any], loaders: Sequence[tuple[str, bool]]) -> list[Violation]:
    """``resume-position``: the checkpoint holds more train loader states than this run has stateful loaders.

    Args:
        states: the checkpoint's train loader states (:func:`stored_loader_states`).
        loaders: this run's train loaders as ``(class name, stateful)``; stateful = it has
            ``state_dict`` and ``load_state_dict``.

    Returns:
        One violation naming the loaders and the fix, or nothing (also when no loader is known).
    """
    stateful = sum(1 for _, has_state in loaders if has_state)
    if not loaders or len(states) <= stateful:
        return []
    names = ", ".join(name for name, _ in loaders)
    return [
        Violation(
            "resume-position",
            ("train",),
            f"the checkpoint holds the state of {len(states)} resumable train loader(s){_where(states)}, but this "
            f"run's train loader ({names}) has {stateful} that can take it (no state_dict/load_state_dict): "
            f"Lightning would stop with 'The CombinedLoader has {stateful} stateful loaders', and a plain loader would "
            "restart the epoch, not continue where the checkpoint stopped",
            fix="resume with the train loader the checkpoint was saved with (OrderedDataModule / "
            "OrderedLMDataModule's train_dataloader(), a ResumableLoader), or return a resumable loader (one "
            "with state_dict/load_state_dict, e.g. torchdata's StatefulDataLoader); to start the data afresh, "
            "load only the weights (torch.load(path, weights_only=True)['state_dict']) and fit without ckpt_path",
            details={"states": len(states), "stateful": stateful, "loaders": [n for n, _ in loaders]},
        )
    ]

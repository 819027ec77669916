"""Where a run stands in its epoch, read off a Trainer: for checkpoints, and for the resume check.

Gathering only, duck-typed: any train loader with a ``position()`` returning a
:class:`~lightning_order.positions.TrainPosition` (our :class:`~lightning_order.data.engine.loaders.ResumableLoader`)
gives its exact global position; for any other loader the position is Lightning's own count of
the epoch's batches times the global batch (data-parallel ``world_size × loader.batch_size``). The judgement is
:func:`lightning_order.checks.resume.check_resume_position`'s.

Lightning's progress counters are read where they are kept (``trainer.fit_loop.epoch_loop.batch_progress``);
they are public attributes of the loops, which Lightning also restores from the checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_order.checks.loader_states import check_loader_states
from lightning_order.parallelism import data_parallel
from lightning_order.positions import TrainPosition
from lightning_order.rules import Violation

__all__ = [
    "loader_state_misfits",
    "requested_train_loaders",
    "resume_point",
    "resumed_at",
    "saved_position",
    "train_loader",
]


def train_loader(trainer: Any) -> Any:
    """The fit loop's train loader (the single loader the datamodule returned); ``None`` before fit sets it up."""
    try:
        loaders = trainer.train_dataloader
    except AttributeError:  # pragma: no cover - a Trainer without a fit loop
        return None
    if isinstance(loaders, dict):
        loaders = list(loaders.values())
    if isinstance(loaders, (list, tuple)):  # several loaders: no single position to speak of
        return loaders[0] if len(loaders) == 1 else None
    return loaders


def _flat(loaders: Any) -> list[Any]:
    """The loaders of what a ``train_dataloader()`` returned (one, a list, a dict, a ``CombinedLoader``)."""
    loaders = getattr(loaders, "flattened", loaders)  # Lightning's CombinedLoader
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return [leaf for item in loaders for leaf in _flat(item)]
    return [loaders]


def requested_train_loaders(trainer: Any) -> list[tuple[str, bool]]:
    """This run's train loaders as ``(class name, stateful)``, asked for before Lightning sets up the fit's data.

    Calls the datamodule's ``train_dataloader()`` (else the module's) once more, so a resume can be
    judged before Lightning hands the checkpoint's loader states over; ``[]`` when neither makes one
    (loaders passed to ``fit`` directly: Lightning's own message stands).
    """
    source = trainer.datamodule if trainer.datamodule is not None else trainer.lightning_module
    try:
        loaders = source.train_dataloader()
    except Exception:  # not defined here, or failing: Lightning asks again and reports it itself
        return []
    return [
        (
            type(loader).__name__,
            callable(getattr(loader, "state_dict", None))
            and callable(getattr(loader, "load_state_dict", None)),
        )
        for loader in _flat(loaders)
    ]


def loader_state_misfits(trainer: Any, states: list[Any]) -> list[Violation]:
    """The checkpoint's train loader ``states`` this run's train loaders cannot take (``resume-position``).

    Judged before Lightning restores them (its own error names no position and no fix); asks the
    datamodule for its train loaders only when the checkpoint holds states.
    """
    return check_loader_states(states, requested_train_loaders(trainer)) if states else []


def _loader_position(loader: Any) -> TrainPosition | None:
    position = getattr(loader, "position", None)
    found = position() if callable(position) else None
    return found if isinstance(found, TrainPosition) else None


def _progress(trainer: Any) -> tuple[int, int | None]:
    """Lightning's ``(batches started in the current epoch, batches per epoch)``."""
    total = trainer.num_training_batches
    total = int(total) if total not in (None, float("inf")) else None
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready), total


def _loader_facts(trainer: Any, loader: Any) -> dict[str, Any]:
    world = data_parallel(trainer).size  # tensor-parallel ranks of one group read one share
    batch = getattr(loader, "batch_size", None)
    return {
        "world_size": world,
        "batch_size": batch,
        "global_batch": world * int(batch) if batch else None,
        "loader": type(loader).__name__,
        "resumable": callable(getattr(loader, "state_dict", None))
        and callable(getattr(loader, "load_state_dict", None)),
    }


def saved_position(trainer: Any) -> dict[str, Any] | None:
    """Where the run stands now (what a checkpoint saves): plain data, or ``None`` outside a fit.

    ``epoch``, ``samples`` (global samples of the epoch consumed), ``batches`` and
    ``epoch_batches`` (Lightning's count), ``world_size``, ``batch_size``, ``global_batch``,
    ``loader``, ``resumable``; with a loader of ours, the whole
    :class:`~lightning_order.positions.TrainPosition` (``seed``, ``shuffle``, ``dataset_size``, ``order``, ...).
    """
    loader = train_loader(trainer)
    if loader is None:
        return None
    batches, total = _progress(trainer)
    # The epoch the batch count belongs to: the one started last (after fit() ended at max_steps,
    # Lightning's current_epoch has moved on already).
    epoch = max(0, int(trainer.fit_loop.epoch_progress.current.started) - 1)
    facts = {"epoch": epoch, "batches": batches, "epoch_batches": total}
    facts.update(_loader_facts(trainer, loader))
    position = _loader_position(loader)
    if position is not None:
        return {**facts, **position.to_dict()}
    batch = facts["global_batch"]
    return {**facts, "samples": batches * batch if batch else None}


def resume_point(trainer: Any) -> dict[str, Any] | None:
    """Where the resumed run will read (call it after the restore, before the first batch: ``on_train_start``).

    ``epoch`` and ``batches`` (Lightning's batches already done in it; 0 at an epoch boundary),
    ``epoch_batches``, the loader's facts, ``next``: the loader's restored position (``None``
    for a loader without one), and ``restored``: whether the loader continues at ``next`` whatever
    Lightning's epoch counter says (a restored :class:`~lightning_order.data.engine.loaders.ResumableLoader`).
    """
    loader = train_loader(trainer)
    if loader is None:
        return None
    batches, total = _progress(trainer)
    if total is None:
        return None
    epochs = trainer.fit_loop.epoch_progress.current
    if epochs.processed >= epochs.ready or batches >= total:
        batches = 0  # Lightning counts the checkpoint's epoch as ended: it starts the next one at its head
    position = _loader_position(loader)
    facts = {"epoch": int(trainer.current_epoch), "batches": batches, "epoch_batches": total}
    facts.update(_loader_facts(trainer, loader))
    facts["next"] = position.to_dict() if position is not None else None
    facts["restored"] = position is not None and bool(getattr(loader, "restored", False))
    return facts


def resumed_at(resumed: Mapping[str, Any], global_step: int) -> dict[str, Any]:
    """Where a resumed run starts reading (for the ``train`` record): ``epoch``, ``samples``, ``batches``, ``global_step``.

    With a restored loader position, the data's epoch and the batches of it done (the position is
    the loader's, whatever Lightning's epoch counter says).
    """
    epoch, batches = int(resumed["epoch"]), int(resumed["batches"])
    nxt = resumed.get("next")
    if nxt and resumed.get("restored") and int(nxt["epoch"]) != epoch:  # e.g. saved after fit() returned
        epoch, samples = int(nxt["epoch"]), int(nxt["samples"])
        batches = samples // int(nxt["global_batch"])
    elif nxt:  # the loader's own position; another epoch than Lightning's starts at its head
        samples = int(nxt["samples"]) if int(nxt["epoch"]) == epoch else 0
    else:  # a loader without a position restarts its epoch, whatever Lightning counts
        samples = 0
    return {"epoch": epoch, "samples": samples, "batches": batches, "global_step": global_step}

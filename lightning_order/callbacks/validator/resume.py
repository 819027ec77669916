"""A resumed run, as the validator sees it: the checkpoint's restore, its content sample, the data position.

Gathering only; the judgements are :mod:`lightning_order.checks.resume`,
:mod:`lightning_order.checks.resume_content`, :mod:`lightning_order.checks.position_counts` and
:mod:`lightning_order.checks.loader_states`, registered at the end of this module. Three parts:

**The restore.** Lightning restores weights through the strategy's ``load_model_state_dict`` (a
``.ckpt`` file's, after ``setup``); :func:`guard_restore` wraps it so the callback judges the
checkpoint just before (and :func:`release_restore` removes the wrappers). Lightning's
``ModelParallelStrategy`` (and FSDP with sharded state) saves a folder instead: the shards,
written by ``torch.distributed.checkpoint``, and ``meta.pt`` with everything else. It restores
the shards into the model inside its ``load_checkpoint``, before ``load_model_state_dict`` (where
a ``.ckpt`` file is judged), and a shard that does not fit ends in torch's ``CheckpointException``
quoting every rank's traceback. So the validator also wraps both ends of the strategy for folders:
:func:`tie_sharded_saves` (every folder it saves records its shards in ``meta.pt``,
:func:`~lightning_order.checkpoint.tie_shards`) and :func:`sharded_restore` (a folder's ``meta.pt``
is read and judged before any shard loads; what torch cannot load is one
:class:`~lightning_order.errors.CheckpointError` line). The wrappers are plain functions over the
strategy's public methods; what they judge with is the callback's.

**The content sample** a checkpoint stores for a datamodule with no ledger: items read by index
from the map-style dataset behind each split's dataloader at fixed indices, hashed as the rank
comparisons hash them (:func:`~lightning_order.callbacks.validator.content.hash_items`), inside
:func:`~lightning_order.callbacks.validator.reading.untouched` (an item may draw random numbers or
count its reads). An iterable split cannot be read at fixed indices: it is left out (the
tokenizer is still compared). Loaders passed to ``Trainer.fit`` with no datamodule (Megatron's
indexed datasets are often trained so) are sampled at ``on_train_start``, the first hook that
holds them (:func:`loaders_content_sample`), and judged there, before step 1.

**The data position**: where a run stands in its epoch, read off a Trainer, for checkpoints and
for the resume check. Any train loader with a ``position()`` returning a
:class:`~lightning_order.positions.TrainPosition` (our
:class:`~lightning_order.data.engine.loaders.ResumableLoader`) gives its exact global position;
for any other loader the position is Lightning's own count of the epoch's batches times the global
batch (data-parallel ``world_size × loader.batch_size``). Lightning's progress counters are read
where they are kept (``trainer.fit_loop.epoch_loop.batch_progress``); they are public attributes
of the loops, which Lightning also restores from the checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from lightning_order.callbacks.validator.content import ITEM_HASH_SCHEME, hash_items
from lightning_order.callbacks.validator.phases import all_gather
from lightning_order.callbacks.validator.reading import (
    SPLIT_LOADERS,
    item_size,
    note_unread,
    rows_within,
    split_dataset,
    untouched,
)
from lightning_order.checkpoint import is_sharded_checkpoint, read_sharded_meta, tie_shards
from lightning_order.checks.loader_states import check_loader_states
from lightning_order.checks.position_counts import check_stored_position, stored_loop_count
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.checks.resume import (
    check_resume,
    check_resume_position,
    check_resume_proof,
    stored_fingerprints,
    stored_position,
)
from lightning_order.checks.resume_content import check_resume_content, sample_indices
from lightning_order.errors import CheckpointError, LightningOrderError
from lightning_order.ledger import CHECKPOINT_KEY
from lightning_order.parallelism import data_parallel
from lightning_order.positions import TrainPosition
from lightning_order.rules import Violation

__all__ = [
    "content_sample",
    "guard_restore",
    "loaders_content_sample",
    "release_restore",
    "requested_train_loaders",
    "resume_point",
    "resumed_at",
    "saved_position",
    "sharded_restore",
    "stored_content",
    "stored_evidence",
    "tie_sharded_saves",
    "train_loader",
    "unloadable_shards",
]

log = logging.getLogger(__name__)


# -- the restore --------------------------------------------------------------------------------
#: The strategy's methods :func:`guard_restore` wraps (instance attributes over the class's own).
_RESTORE_METHODS = ("load_model_state_dict", "load_checkpoint")


def guard_restore(
    strategy: Any,
    judge: Callable[[Mapping[str, Any]], None],
    shapes: Callable[[Mapping[str, Any]], None],
    release: Callable[[], None],
) -> bool:
    """Wraps ``strategy``'s weight restore: ``judge`` sees the checkpoint before any weight loads.

    Args:
        strategy: the Trainer's strategy.
        judge: called with the checkpoint (a file's whole content, a folder's ``meta.pt``); raises
            to refuse it.
        shapes: called with a file's checkpoint just before its weights load (their shapes).
        release: called first by the restore, and before a refusal propagates (it calls
            :func:`release_restore`).

    Returns:
        Whether the wrappers are in place (``False``: another one wraps the restore already).
    """
    if "load_model_state_dict" in vars(strategy):
        return False
    original = strategy.load_model_state_dict

    def load_model_state_dict(checkpoint: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        release()
        judge(checkpoint)
        shapes(checkpoint)
        return original(checkpoint, *args, **kwargs)

    strategy.load_model_state_dict = load_model_state_dict
    strategy.load_checkpoint = sharded_restore(strategy.load_checkpoint, judge, release)
    return True


def release_restore(strategy: Any) -> None:
    """Removes :func:`guard_restore`'s wrappers: the strategy's own methods again."""
    for name in _RESTORE_METHODS:
        vars(strategy).pop(name, None)


def tie_sharded_saves(strategy: Any) -> None:
    """Ties every distributed checkpoint folder ``strategy`` saves: its ``meta.pt`` records its shards.

    The wrapper stays for the strategy's life (a checkpoint saved after ``fit`` returned is tied
    too); it only adds to a folder the save wrote, on global rank 0, which wrote ``meta.pt``.
    """
    if "save_checkpoint" in vars(strategy):  # ours already (or another wrapper's: left alone)
        return
    original = strategy.save_checkpoint

    def save_checkpoint(checkpoint: dict[str, Any], filepath: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(checkpoint, filepath, *args, **kwargs)
        # The save moved the weights into the shards; what is left is meta.pt's content.
        sharded = "state_dict" not in checkpoint and is_sharded_checkpoint(filepath)
        if sharded and CHECKPOINT_KEY in checkpoint and strategy.is_global_zero:
            tie_shards(checkpoint, filepath)
        return result

    strategy.save_checkpoint = save_checkpoint


def sharded_restore(
    load: Callable[..., Any], judge: Callable[[Mapping[str, Any]], None], refused: Callable[[], None]
) -> Callable[..., Any]:
    """A strategy's ``load_checkpoint`` (``load``) that judges a folder's ``meta.pt`` before its shards load.

    Args:
        load: the strategy's own ``load_checkpoint``.
        judge: called with the folder's ``meta.pt`` (plain data) before any shard is read; raises
            to refuse it.
        refused: called before any refusal propagates (the callback removes its wrappers).

    Returns:
        The wrapper; a file (not a folder) goes to ``load`` untouched.
    """

    def load_checkpoint(checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_sharded_checkpoint(checkpoint_path):
            return load(checkpoint_path, *args, **kwargs)
        try:
            judge(read_sharded_meta(checkpoint_path))
            return load(checkpoint_path, *args, **kwargs)
        except (LightningOrderError, KeyboardInterrupt, SystemExit):
            refused()
            raise
        except BaseException as err:  # torch's CheckpointException is a BaseException
            refused()
            raise unloadable_shards(checkpoint_path, err) from None

    return load_checkpoint


def unloadable_shards(path: Any, err: BaseException) -> CheckpointError:
    """The one line for a distributed checkpoint whose shards do not load into this run's model."""
    failures = getattr(err, "failures", None)  # torch's CheckpointException: rank -> what failed there
    if isinstance(failures, Mapping) and failures:
        failure = next(iter(failures.values()))
        err = failure[0] if isinstance(failure, tuple) and failure else failure  # (exception, its stack)
    detail = next((line.strip() for line in str(err).splitlines() if line.strip()), "no detail")[:160]
    return CheckpointError(
        f"the distributed checkpoint {path} cannot be restored into this model ({type(err).__name__}: {detail}): "
        "its shards hold other tensors than the model's (another vocabulary, architecture or run); resume with "
        "the model and data config it was trained with, or warm-start with lightning_order.recover(path, ...)"
    )


# -- the content sample -----------------------------------------------------------------------------
def _split_sample(dm: Any, split: str) -> dict[str, Any] | None:
    return _dataset_sample(split_dataset(dm, split)[0], split)


def _map_dataset(loaders: Any) -> Any:
    """The map-style dataset behind a loader Lightning set up (the first of several), or ``None``."""
    loaders = _flat(loaders) if loaders is not None else []
    dataset = getattr(loaders[0], "dataset", None) if loaders else None
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
        return None
    return dataset


def _dataset_sample(dataset: Any, split: str) -> dict[str, Any] | None:
    if dataset is None or not len(dataset):
        return None
    try:
        with untouched(dataset) as blocked:
            if blocked is not None:
                note_unread(dataset, blocked)
                return None
            hashes = _hashes(dataset, sample_indices(len(dataset)))
    except Exception as err:  # an item that cannot be read by index: the split is left out
        log.debug("OrderValidator: could not sample %s for the checkpoint (%s)", split, err)
        return None
    return {"length": len(dataset), "hashes": hashes}


def _hashes(dataset: Any, indices: list[int]) -> list[int]:
    """The inputs hashes of ``dataset``'s items at ``indices``, read a chunk within the read budget at a time."""
    chunk = rows_within(item_size(dataset[indices[0]]), len(indices)) if indices else 1
    hashes: list[int] = []
    for start in range(0, len(indices), chunk):
        hashes += [h[1] for h in hash_items([dataset[i] for i in indices[start : start + chunk]])]
    return hashes


def content_sample(trainer: Any, dm: Any, tokenizer: str | None) -> dict[str, Any]:
    """This rank's content sample (its keys: :mod:`lightning_order.checks.resume_content`).

    Collective under DDP (every rank must call it): the ranks compare their samples to tell one
    dataset on every rank from a shard per rank.

    Args:
        trainer: the Trainer (its rank and data-parallel position).
        dm: the datamodule.
        tokenizer: the fingerprint of the tokenizer in use, or ``None``.
    """
    splits = {s: sample for s in SPLIT_LOADERS if (sample := _split_sample(dm, s)) is not None}
    return _ranked_sample(trainer, splits, tokenizer)


def loaders_content_sample(trainer: Any, loaders: Mapping[str, Any], tokenizer: str | None) -> dict[str, Any]:
    """This rank's content sample of the loaders passed to ``Trainer.fit`` (no datamodule to ask).

    Call it once Lightning has set those loaders up (``on_train_start``): before, only Lightning's
    private data source holds them. Collective under DDP, as :func:`content_sample`.

    Args:
        trainer: the Trainer (its rank and data-parallel position).
        loaders: the loaders set up for ``fit``, by split (``"train"``, ``"val"``).
        tokenizer: the fingerprint of the tokenizer in use, or ``None``.
    """
    splits = {
        split: sample
        for split, loader in loaders.items()
        if (sample := _dataset_sample(_map_dataset(loader), split)) is not None
    }
    return _ranked_sample(trainer, splits, tokenizer)


def _ranked_sample(trainer: Any, splits: dict[str, Any], tokenizer: str | None) -> dict[str, Any]:
    """The content sample of ``splits``, with whether every rank holds the same (collective)."""
    gathered = all_gather(trainer, splits)
    dp = data_parallel(trainer)
    return {
        "tokenizer": tokenizer,
        "splits": splits,
        "same_on_ranks": all(g == gathered[0] for g in gathered),
        "data_parallel": {"size": dp.size, "rank": dp.rank},
        "item_hashes": ITEM_HASH_SCHEME,
    }


def stored_content(checkpoint: Mapping[str, Any], state_key: str) -> dict[str, Any] | None:
    """The content sample a checkpoint's validator state holds, or ``None`` (none saved)."""
    state = (checkpoint.get("callbacks") or {}).get(state_key)
    content = state.get("content") if isinstance(state, Mapping) else None
    return dict(content) if isinstance(content, Mapping) and content else None


def stored_evidence(checkpoint: Mapping[str, Any], state_key: str, owner: str) -> dict[str, Any]:
    """The ``resume`` phase's gather: what a checkpoint holds of the data it was trained on.

    ``fingerprints``, ``content`` (:func:`stored_content`), ``position`` and ``loop_count``
    (Lightning's own count), read from the file before any of its weights is restored.

    Args:
        checkpoint: the loaded checkpoint.
        state_key: the validator's state key (where its saved state is).
        owner: the validator's class name, for the one-line error on a damaged state.
    """
    return {
        "fingerprints": stored_fingerprints(checkpoint, state_key, owner=owner),
        "content": stored_content(checkpoint, state_key),
        "position": stored_position(checkpoint, state_key, owner=owner),
        "loop_count": stored_loop_count(checkpoint),
    }


# -- the data position ------------------------------------------------------------------------------
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


def requested_train_loaders(source: Any) -> list[tuple[str, bool]]:
    """This run's train loaders as ``(class name, stateful)``, asked for before Lightning sets up the fit's data.

    Calls ``source.train_dataloader()`` once more, so a resume can be judged before Lightning hands
    the checkpoint's loader states over; ``[]`` when it makes none (loaders passed to ``fit``
    directly: Lightning's own message stands).

    Args:
        source: what defines the train loaders: the datamodule, else the LightningModule.
    """
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


# -- the checks of a resumed run ---------------------------------------------------------------------
def _judge_resume_data(evidence: CheckEvidence) -> list[Violation]:
    """The checkpoint's data (fingerprints, or the content sample without a ledger) against this run's."""
    stored = evidence.checkpoint
    if stored is None or "fingerprints" not in stored:
        return []
    this_run = dict(evidence.fingerprints)
    found = check_resume(stored["fingerprints"], this_run) + check_resume_proof(
        stored["fingerprints"], this_run
    )
    return found + check_resume_content(
        stored.get("content"), dict(evidence.samples.get("resume_sample") or {})
    )


def _judge_stored_position(evidence: CheckEvidence) -> list[Violation]:
    # Every copy of the position may be edited alike: its arithmetic and Lightning's count decide.
    stored = evidence.checkpoint
    return check_stored_position(stored.get("position"), stored.get("loop_count")) if stored else []


def _gather_loader_states(trainer: Any, evidence: CheckEvidence) -> list[tuple[str, bool]]:
    states = (evidence.checkpoint or {}).get("loader_states")
    if not states:
        return []
    return requested_train_loaders(
        trainer.datamodule if trainer.datamodule is not None else trainer.lightning_module
    )


def _judge_loader_states(evidence: CheckEvidence) -> list[Violation]:
    # Judged before Lightning restores them (same file, every rank): its own error names no position and no fix.
    states = (evidence.checkpoint or {}).get("loader_states")
    return check_loader_states(states, evidence.gathered or []) if states else []


def _judge_resume_position(evidence: CheckEvidence) -> list[Violation]:
    # The loader is restored and no batch is drawn: the last moment to check where it continues.
    stored = evidence.checkpoint
    if stored is None or stored.get("resumed") is None:
        return []
    return check_resume_position(stored.get("position"), stored["resumed"])


register_check(
    "resume-data",
    _judge_resume_data,
    # A checkpoint's file before its weights load; else its restored state, once the model is built;
    # loaders passed to fit (no datamodule) once Lightning has set them up, before step 1.
    phase=(Phase.RESUME, Phase.FIT_START, Phase.TRAIN_START),
    reads=[EvidenceKind.CHECKPOINT, EvidenceKind.LEDGER, EvidenceKind.SAMPLES],
    rules=("resume-data-changed",),
    order=30,
)
register_check(
    "stored-position",
    _judge_stored_position,
    phase=Phase.RESUME,
    reads=[EvidenceKind.CHECKPOINT],
    rules=("resume-position",),
    order=40,
)
register_check(
    "loader-states",
    _judge_loader_states,
    phase=Phase.FIT_START,
    reads=[EvidenceKind.CHECKPOINT],
    rules=("resume-position",),
    gather=_gather_loader_states,
    order=40,
    fatal=True,  # Lightning would fail restoring them: nothing after this can run
)
register_check(
    "resume-position",
    _judge_resume_position,
    phase=Phase.TRAIN_START,
    reads=[EvidenceKind.CHECKPOINT],
    rules=("resume-position",),
    order=10,
)

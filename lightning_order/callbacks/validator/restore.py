"""The strategy's checkpoint methods as ``OrderValidator`` wraps them: the weight restore, judged first.

Lightning restores weights through the strategy's ``load_model_state_dict`` (a ``.ckpt`` file's,
after ``setup``); :func:`guard_restore` wraps it so the callback judges the checkpoint just before
(and :func:`release_restore` removes the wrappers). Lightning's ``ModelParallelStrategy`` (and
FSDP with sharded state) saves a folder instead: the shards,
written by ``torch.distributed.checkpoint``, and ``meta.pt`` with everything else. It restores the
shards into the model inside its ``load_checkpoint``, before ``load_model_state_dict`` (where a
``.ckpt`` file is judged), and a shard that does not fit ends in torch's ``CheckpointException``
quoting every rank's traceback. So the validator also wraps both ends of the strategy for folders:

* :func:`tie_sharded_saves`: every folder it saves records its shards in ``meta.pt``
  (:func:`~lightning_order.checkpoint.tie_shards`);
* :func:`sharded_restore`: a folder's ``meta.pt`` is read and judged before any shard loads
  (:func:`~lightning_order.checkpoint.read_sharded_meta` refuses a mixed folder), and what torch
  cannot load is one :class:`~lightning_order.errors.CheckpointError` line.

The wrappers are plain functions over the strategy's public methods; what they judge with is the
callback's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lightning_order.checkpoint import is_sharded_checkpoint, read_sharded_meta, tie_shards
from lightning_order.errors import CheckpointError, LightningOrderError
from lightning_order.ledger import CHECKPOINT_KEY

__all__ = ["guard_restore", "release_restore", "sharded_restore", "tie_sharded_saves", "unloadable_shards"]

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

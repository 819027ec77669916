"""The Trainer-side pause: an emergency checkpoint with our entry, then every rank stops."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.callbacks.validator.resume import saved_position
from lightning_order.checkpoint import plain
from lightning_order.checks.symptoms import Diagnosis
from lightning_order.cost import waste_report
from lightning_order.ledger import CHECKPOINT_KEY

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pytorch_lightning as pl

    from lightning_order.rules import Violation

__all__ = ["FORMAT", "FORMAT_VERSION", "PAUSE_DIR", "pause", "pause_path"]

FORMAT = "lightning_order.pause"
FORMAT_VERSION = 1
#: The folder a pause checkpoint goes in, under the trainer's ``default_root_dir`` (the working
#: directory by default). Never the package's own name: a ``lightning_order/`` folder in the working
#: directory is found before an editable install, as an empty namespace package, and
#: ``from lightning_order import recover`` run there fails.
PAUSE_DIR = "lightning_order_pause"


def pause_path(root_dir: str | Path, step: int, folder: str | Path | None = None) -> Path:
    """Where a pause at ``step`` is written: ``<folder>/pause-step<step>.ckpt``.

    Args:
        root_dir: the trainer's ``default_root_dir``.
        step: the global step of the pause.
        folder: the folder asked for (``SymptomMonitor(checkpoint_dir=...)``); default:
            ``<root_dir>/``:data:`PAUSE_DIR`.
    """
    return Path(folder or Path(root_dir) / PAUSE_DIR) / f"pause-step{int(step)}.ckpt"


def pause(
    trainer: pl.Trainer,
    path: str | Path,
    *,
    reason: Iterable[Diagnosis | Violation] = (),
    gpu_hour_price: float | None = None,
    elapsed_s: float | None = None,
) -> Path:
    """Saves an emergency checkpoint and stops the run on every rank. Call it on all ranks.

    The checkpoint is a normal Lightning checkpoint (weights, optimizer and scheduler states, the
    step reached, callback states, so ``trainer.fit(..., ckpt_path=path)`` resumes it) with our
    entry under :data:`~lightning_order.ledger.CHECKPOINT_KEY`, all plain data (it loads with
    ``weights_only=True``): the format, the reasons (diagnoses or violations), the datamodule's
    ledger, class name and hyper-parameters, its vocabulary (token -> id), the model's class
    name, the :func:`~lightning_order.cost.waste_report`, and the data position (``position``:
    the epoch, the global samples of it consumed, the seed, the global batch and world size; see
    :func:`~lightning_order.callbacks.validator.resume.saved_position`). The train loader's own state is in
    Lightning's loop state as in any checkpoint, so resuming the pause continues at that sample.

    Args:
        trainer: the running trainer.
        path: where to write the checkpoint.
        reason: the diagnoses (from :class:`~lightning_order.callbacks.SymptomMonitor`) or
            violations (from ``OrderValidator``) behind the pause.
        gpu_hour_price: the price of one device-hour, for the cost in the waste report.
        elapsed_s: seconds trained so far; default: a callback's ``elapsed_s`` (the monitor's), or 0.

    Returns:
        The checkpoint's path.
    """
    path = Path(path)
    if elapsed_s is None:
        elapsed_s = next((float(cb.elapsed_s) for cb in trainer.callbacks if hasattr(cb, "elapsed_s")), 0.0)
    payload = _payload(trainer, list(reason), gpu_hour_price, elapsed_s)
    # Trainer.save_checkpoint, with our entry added by a callback that runs last, before the single
    # write: every rank takes part (a sharded strategy gathers here) and only global rank 0 writes.
    entry = _pause_entry(payload)
    trainer.callbacks.append(entry)
    try:
        trainer.save_checkpoint(path, weights_only=False)
    finally:
        trainer.callbacks.remove(entry)
    trainer.should_stop = True
    return path


def _pause_entry(payload: dict[str, Any]) -> pl.Callback:
    """A callback that adds ``payload`` under our key of the checkpoint being saved (no state of its own)."""
    from pytorch_lightning import Callback
    from typing_extensions import override

    class PauseEntry(Callback):
        @override
        def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            # Merge, so what OrderValidator.on_save_checkpoint put under the same key (the data's
            # fingerprints) survives the pause.
            checkpoint[CHECKPOINT_KEY] = {**(checkpoint.get(CHECKPOINT_KEY) or {}), **payload}

    return PauseEntry()


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _payload(
    trainer: pl.Trainer, reason: list[Any], gpu_hour_price: float | None, elapsed_s: float
) -> dict[str, Any]:
    datamodule = trainer.datamodule
    ledger = getattr(datamodule, "ledger", None)
    tokenizer = getattr(datamodule, "tokenizer", None)
    vocab = tokenizer.get_vocab() if tokenizer is not None and hasattr(tokenizer, "get_vocab") else None
    reasons = [
        {"type": "diagnosis" if isinstance(item, Diagnosis) else "violation", **item.to_dict()}
        for item in reason
    ]
    return plain(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "reason": reasons,
            "step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "position": saved_position(trainer),
            "ledger": ledger.state_dict() if hasattr(ledger, "state_dict") else None,
            "vocab": dict(vocab) if vocab is not None else None,
            "datamodule": {
                "class": _qualname(datamodule) if datamodule is not None else None,
                "hparams": dict(getattr(datamodule, "hparams", {}) or {}),
            },
            "model": {"class": _qualname(trainer.lightning_module)},
            "waste": waste_report(
                elapsed_s,
                trainer.world_size,
                step=trainer.global_step,
                planned_steps=trainer.estimated_stepping_batches,
                gpu_hour_price=gpu_hour_price,
            ),
        }
    )

"""What the end-of-run summary reports about training itself: train tokens per second and the loss curve.

:class:`RunRecord` is a callback that :class:`~lightning_order.cli.lightning.OrderCLI` adds to every
trainer it builds. It only gathers: the train loss of each step, the validation loss of each pass,
the tokens of each train batch (LM pipelines only: a classifier's padded ``input_ids`` are not
what its throughput is read in) and the training time with validation passes taken out.
:func:`fit_figures` turns that into the summary's lines and writes the loss curve beside the logs.

Tokens are counted on the rank that prints the summary and multiplied by the world size: the
data-parallel ranks draw equal shares, so this is the run's throughput without a collective at
the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from typing_extensions import override

from lightning_order.outputs import describe_os_error, join
from lightning_order.plotting import LOSS_CURVE_FILE, can_plot, write_loss_curve

__all__ = ["RunRecord", "batch_tokens", "fit_figures"]


def batch_tokens(batch: Any) -> int:
    """The tokens a train batch holds: ``input_ids`` (its attention mask's ones when it has one).

    A tuple or list counts its first tensor (nanoGPT's ``(x, y)``); a bare tensor its elements.
    """
    if isinstance(batch, Mapping):
        mask = batch.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            return int(mask.sum().item())  # padding is not throughput
        ids = batch.get("input_ids")
        return int(ids.numel()) if isinstance(ids, torch.Tensor) else 0
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return int(batch[0].numel())
    return int(batch.numel()) if isinstance(batch, torch.Tensor) else 0


def _loss_value(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    return float(loss.detach().float().item()) if isinstance(loss, torch.Tensor) else None


class RunRecord(Callback):
    """Gathers the loss curve and the train throughput of a fit (nothing is printed or written here).

    Args:
        count_tokens: count the tokens of each train batch (an LM pipeline).
    """

    def __init__(self, count_tokens: bool = False) -> None:
        self.count_tokens = count_tokens
        self.train_loss: list[tuple[int, float]] = []
        self.val_loss: list[tuple[int, float]] = []
        self.tokens = 0
        self.train_seconds = 0.0
        self._train_start: float | None = None
        self._val_start: float | None = None
        self._val_seconds = 0.0

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._train_start, self._val_seconds = time.perf_counter(), 0.0

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.count_tokens:
            self.tokens += batch_tokens(batch)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = _loss_value(outputs)
        if loss is None:  # manual optimization returns nothing: read what the step logged
            loss = _loss_value(trainer.callback_metrics.get("train_loss"))
        if loss is not None:
            self.train_loss.append((trainer.global_step, loss))

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._val_start = time.perf_counter()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._val_start is not None and self._train_start is not None and not self.train_seconds:
            self._val_seconds += time.perf_counter() - self._val_start  # inside the fit: not training
        self._val_start = None
        loss = _loss_value(trainer.callback_metrics.get("val_loss"))
        if loss is not None and not trainer.sanity_checking:
            self.val_loss.append((trainer.global_step, loss))

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._train_start is not None:
            self.train_seconds = time.perf_counter() - self._train_start - self._val_seconds

    def tokens_per_second(self, world_size: int = 1) -> float | None:
        """Train tokens per second over all ranks, or ``None`` (no tokens counted, or no time)."""
        if not self.tokens or self.train_seconds <= 0:
            return None
        return self.tokens * world_size / self.train_seconds


def fit_figures(record: RunRecord, log_dir: str | Path | None, world_size: int = 1) -> list[tuple[str, str]]:
    """The summary's lines about training, as ``(label, text)``; writes the loss curve into ``log_dir``.

    Args:
        record: what the run gathered.
        log_dir: the run's log folder (the trainer's ``log_dir``, local or an fsspec URL); ``None``:
            no curve is written. A curve that cannot be written is a line saying where and why.
        world_size: the number of ranks (the throughput is the run's, not one rank's).
    """
    rows: list[tuple[str, str]] = []
    rate = record.tokens_per_second(world_size)
    if rate is not None:
        tokens = record.tokens * world_size
        rows.append(
            (
                "train tokens per second",
                f"{rate:,.0f} ({tokens:,} tokens in {record.train_seconds:.1f} s of training, "
                "validation passes excluded)",
            )
        )
    if log_dir is not None and (record.train_loss or record.val_loss):
        if not can_plot():
            rows.append(("loss curve", "not drawn: pip install 'lightning-order[plots]' (matplotlib)"))
        else:
            target = join(log_dir, LOSS_CURVE_FILE)  # a URL stays one: the curve goes where the logs go
            try:
                written = write_loss_curve(target, record.train_loss, record.val_loss)
            except OSError as err:  # the run trained: a figure it cannot write is a line, not a failure
                rows.append(
                    (
                        "loss curve",
                        f"not written to {target} ({describe_os_error(err)}); remove it or make its folder "
                        "writable (the losses are in the run's logs)",
                    )
                )
            else:
                if written is not None:
                    rows.append(("loss curve", str(written)))
    return rows

"""What the monitor reads from training: numbers left on their device until a check reads them.

Per step the monitor only appends: a loss tensor to :attr:`TrainReadings.pending`, an
unknown-token count to its :class:`UnknownCounter`, a validation batch's column sums to an
:class:`InputStats`. :func:`to_host` reads them at a check, in one host-device sync on a device
(none per step); :class:`TrainReadings` keeps the bounded windows the detectors judge and
:class:`RankLosses` every rank's losses, from the small vector the ranks all-gather per check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import torch

from lightning_order.checks.symptoms import current_train_loss

__all__ = ["InputStats", "RankLosses", "TrainReadings", "UnknownCounter", "to_host"]

_MAX_COLUMNS = 64
_LEAST_STEPS = 8  # train losses a validation's train estimate uses at least (when there are)


class TrainReadings:
    """The train losses the monitor judges, and the share of unknown tokens in the first batches.

    Per step the monitor appends the loss tensor, still on its device, to :attr:`pending`;
    :meth:`flush`, once per check, reads them (and the pending unknown-token counts) and fills the
    windows: :attr:`early` (the first ``warmup_steps + window`` losses, the early-oscillation
    detector's), :attr:`start` (the first ``warmup_steps``, the plateau detector's baseline) and
    :attr:`recent` (the latest ``window``). At each validation :meth:`add_validation` keeps the
    train loss *at* the validation (the trend of the steps since the epoch started or the last
    validation, carried to the validation's step, with its spread) and the validation loss, which
    the train/validation gap detector compares. A view for inspection: only the monitor writes it.

    Args:
        thresholds: the monitor's resolved detector options (``early-oscillation``, ``plateau``).
    """

    def __init__(self, thresholds: Mapping[str, Mapping[str, float]]) -> None:
        osc, plat = thresholds["early-oscillation"], thresholds["plateau"]
        self.pending: list[torch.Tensor] = []
        self.early: list[float] = []
        self.early_len = int(osc["warmup_steps"] + osc["window"])
        self.start: list[float] = []
        self.start_len = int(plat["warmup_steps"])
        self.recent: deque[float] = deque(maxlen=int(plat["window"]))
        self.unknown = UnknownCounter()
        #: the share of unknown tokens in the counted batches so far (``None``: none counted).
        self.unk_rate: float | None = None
        #: per validation: the train loss at its step (:func:`~lightning_order.checks.symptoms.current_train_loss`),
        #: the standard error of that estimate's logarithm, and the validation loss.
        self.epoch_train: list[float] = []
        self.train_spread: list[float | None] = []
        self.epoch_val: list[float] = []
        #: losses read so far, and where the current stretch (since an epoch start or a validation) began.
        self.seen = 0
        self._stretch = 0
        self._early_taken = False

    def flush(self) -> list[float]:
        """Converts the pending loss tensors (the only host-device sync, once per check); the values."""
        if not self.pending:
            return []
        values, counts = to_host(self.pending, self.unknown.take())
        self.pending.clear()
        self.early.extend(values[: max(self.early_len - len(self.early), 0)])
        self.start.extend(values[: max(self.start_len - len(self.start), 0)])
        self.recent.extend(values)
        self.seen += len(values)
        self.unk_rate = self.unknown.update(counts, self.unk_rate)
        return values

    def take_early(self) -> list[float] | None:
        """The early window once it is full, the first time only (judged once, on the whole window:
        a partial one would make the verdict depend on how often the monitor checks)."""
        if self._early_taken or len(self.early) < self.early_len:
            return None
        self._early_taken = True
        return self.early

    def plateau_losses(self, batches: int) -> list[float] | None:
        """The start window, then the recent one once it no longer overlaps it (``None`` before the
        start window is full); ``batches``: the train batches seen so far."""
        if len(self.start) < self.start_len:
            return None
        return self.start + (list(self.recent) if batches >= self.start_len + len(self.recent) else [])

    def new_stretch(self) -> None:
        """The losses from here on are a new stretch (an epoch starts: rows come round again, and the
        loss jumps); no host-device sync, the pending losses count as read."""
        self._stretch = self.seen + len(self.pending)

    def add_validation(self, val_loss: Any, near: int, least: int = _LEAST_STEPS) -> bool:
        """Keeps a validation's losses: the train loss at this step and its spread, from the losses
        of the current stretch (at most ``near`` of them, at least ``least`` when there are: a
        stretch of a few steps borrows from the one before), and ``val_loss``; ``False`` (nothing
        kept) when either is missing. The next stretch starts here."""
        self.flush()
        count = min(max(self.seen - self._stretch, least), near, len(self.recent))
        self._stretch = self.seen
        estimate = current_train_loss(list(self.recent)[-count:]) if count else None
        if val_loss is None or estimate is None:
            return False
        self.epoch_train.append(estimate[0])
        self.train_spread.append(estimate[1])  # inf: too few losses to know (no leakage verdict)
        self.epoch_val.append(float(val_loss))
        return True


class RankLosses:
    """Every rank's losses at the latest steps, from the vectors the ranks all-gather at each check.

    Each rank sends :meth:`vector`: its losses of the last ``k`` steps (NaN where it has fewer)
    and one flag per symptom it saw. :attr:`rows` keeps one entry per step (every rank's loss
    there) for the latest ``window`` steps; :attr:`divergent_checks` counts the consecutive checks
    that showed ranks diverging.

    Args:
        window: the steps kept.
        k: the steps each check sends (the monitor's ``check_every_n_steps``).
    """

    def __init__(self, window: int, k: int) -> None:
        self.rows: deque[list[float]] = deque(maxlen=window)
        self.k = k
        self.divergent_checks = 0

    def vector(self, values: list[float], flags: list[float], device: torch.device) -> torch.Tensor:
        """This rank's part of the all-gather: its latest ``k`` losses, then ``flags``."""
        recent = [math.nan] * (self.k - len(values[-self.k :])) + values[-self.k :]
        return torch.tensor([*recent, *flags], device=device, dtype=torch.float32)

    def add(self, gathered: list[list[float]]) -> list[list[float]]:
        """Keeps every rank's losses from the gathered vectors (one row per rank); their flags."""
        for index in range(self.k):  # one entry per step: every rank's loss at that step
            self.rows.append([row[index] for row in gathered])
        return [row[self.k :] for row in gathered]

    def per_rank(self) -> list[list[float]]:
        """The kept losses, one list per rank."""
        return [list(column) for column in zip(*self.rows)]

    def persistent(self, candidate: Any, patience: int) -> Any:
        """``candidate`` (a divergence diagnosis or ``None``) once ``patience`` consecutive checks
        showed one, else ``None``."""
        self.divergent_checks = self.divergent_checks + 1 if candidate else 0
        return candidate if self.divergent_checks >= patience else None


class UnknownCounter:
    """Unknown and real tokens of the sampled train batches, read with the losses (one host sync).

    :meth:`add` leaves a ``[unk, tokens]`` tensor on the batch's device per counted batch;
    :meth:`take` hands them to the monitor's flush, which converts them together with the pending
    losses; :meth:`update` adds the converted counts to the totals since the start of the fit.
    """

    def __init__(self) -> None:
        self.pending: list[torch.Tensor] = []
        self.unk = 0
        self.tokens = 0
        self.batches = 0

    def add(self, batch: Any, unk_token_id: int) -> None:
        """Counts a batch's ``input_ids`` equal to ``unk_token_id`` (padding excluded by its mask)."""
        ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
        if not isinstance(ids, torch.Tensor):
            return
        mask = batch.get("attention_mask")
        tokens = (
            mask.sum() if isinstance(mask, torch.Tensor) else torch.tensor(ids.numel(), device=ids.device)
        )
        self.batches += 1
        unknown = (ids == unk_token_id).sum()
        self.pending.append(torch.stack([unknown, tokens.to(unknown.dtype)]))

    def take(self) -> list[torch.Tensor]:
        """The pending counts (``[unk, tokens]`` tensors, one per counted batch), cleared."""
        out, self.pending = self.pending, []
        return out

    def update(self, counts: list[float], previous: float | None) -> float | None:
        """Adds converted ``[unk, tokens, unk, tokens, ...]`` to the totals; the unknown share so far,
        else ``previous``."""
        self.unk += int(sum(counts[0::2]))
        self.tokens += int(sum(counts[1::2]))
        return self.unk / self.tokens if self.tokens else previous


class InputStats:
    """Per-column sums of a batch's floating-point tensors, accumulated on the batch's device.

    Every float tensor with a batch dimension contributes its columns (a tensor of more than
    64 values per row contributes its row mean, one column); the layout is the same on every
    rank, so the per-rank vectors can be all-gathered and compared.
    """

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None
        self.origin: torch.Tensor | None = None
        self.batches = 0

    def add(self, batch: Any) -> None:
        """Adds one batch (a tensor, a mapping or a sequence of tensors)."""
        columns = [c for c in (_columns(t) for t in _tensors(batch)) if c is not None]
        if not columns:
            return
        x = torch.cat(columns, dim=1).detach().float()
        if self.origin is None or self.origin.shape != x[0].shape:
            # The first batch's means as the origin: moments of raw values far from zero (a word
            # count near 60) would lose their spread to float32 cancellation.
            self.origin, self.sums = x.mean(0), None
        d = x - self.origin
        d2 = d * d
        part = torch.stack(
            [d.sum(0), d2.sum(0), (d2 * d).sum(0), (d2 * d2).sum(0), torch.full_like(d[0], d.shape[0])]
        )
        self.sums = part if self.sums is None else self.sums + part
        self.batches += 1

    def vector(self, width: int, device: torch.device) -> torch.Tensor:
        """``[mean..., std..., count..., kurtosis...]`` of ``width`` columns (NaN where unknown), on ``device``.

        The kurtosis (the fourth central moment over the squared variance: 3 for normal data)
        tells how far the standard deviation of a share of the rows may stray by sampling alone.
        """
        out = torch.full((4 * width,), float("nan"), device=device)
        if self.sums is None or self.origin is None:
            return out
        sums = self.sums.to(device)[:, :width]
        n = sums[4].clamp(min=1)
        m1, m2, m3, m4 = (sums[i] / n for i in range(4))
        variance = (m2 - m1 * m1).clamp(min=0)
        fourth = (m4 - 4 * m1 * m3 + 6 * m1 * m1 * m2 - 3 * m1**4).clamp(min=0)
        kurtosis = fourth / (variance * variance).clamp(min=1e-30)
        k = m1.numel()
        out[:k] = m1 + self.origin.to(device)[:width]
        out[width : width + k] = variance.sqrt()
        out[2 * width : 2 * width + k] = sums[4]
        out[3 * width : 3 * width + k] = kurtosis
        return out

    @property
    def width(self) -> int:
        """The number of columns seen."""
        return 0 if self.sums is None else int(self.sums.shape[1])


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return [v for _, v in sorted(batch.items(), key=lambda kv: str(kv[0])) if isinstance(v, torch.Tensor)]
    if isinstance(batch, (list, tuple)):
        return [v for v in batch if isinstance(v, torch.Tensor)]
    return []


def _columns(tensor: torch.Tensor) -> torch.Tensor | None:
    if not tensor.is_floating_point() or tensor.ndim == 0 or tensor.shape[0] == 0:
        return None
    x = tensor.reshape(tensor.shape[0], -1)
    return x.mean(1, keepdim=True) if x.shape[1] > _MAX_COLUMNS else x


def to_host(losses: list[torch.Tensor], counts: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """The pending losses and unknown-token counts as numbers.

    On a device they are joined and read in one host-device sync. On the CPU there is no device
    to wait for, and reading each in turn is cheaper than joining them: 53 µs for the 50 losses
    of a check inside a training loop, where ``torch.stack`` took 69 µs (8 against 17 µs warm).

    Args:
        losses: the per-step loss tensors, in step order.
        counts: the unknown-token counters' ``[unk, tokens]`` tensors.

    Returns:
        The losses (every element of a loss of several, in order) and the counts, flattened.
    """
    if not losses and not counts:
        return [], []
    if (losses or counts)[0].is_cpu:  # one device per run: the first tensor tells
        return _numbers(losses), _numbers(counts)
    joined = torch.cat([t.reshape(-1).float() for t in [*losses, *counts]]).tolist()
    split = sum(t.numel() for t in losses)
    return joined[:split], joined[split:]


def _numbers(tensors: list[torch.Tensor]) -> list[float]:
    values: list[float] = []
    for t in tensors:
        if t.ndim == 0:
            values.append(t.item())
        else:
            values.extend(t.reshape(-1).tolist())
    return values

"""What the SymptomMonitor knows about a run besides its training signals, and input statistics.

:func:`gather_facts` reads, once, what the datamodule and an ``OrderValidator`` in the same
Trainer already know (its violations, the ledger's steps, whether the data keeps a vocabulary
and of which kind) into a :class:`~lightning_order.checks.symptoms.RunFacts`: plain data for the
pure attribution. :class:`InputStats` accumulates per-column sums of the floating-point inputs
on the device (no host sync per step), so that ranks can compare the statistics of their shares
of the validation split at a validation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from lightning_order.callbacks._sampling import _ledger
from lightning_order.checks.ledger import check_ledger, judged_pipeline
from lightning_order.checks.symptoms import SYMPTOMS, Diagnosis, RunFacts
from lightning_order.order import STANDARD_PIPELINE

__all__: list[str] = []

_DETECTOR_DEFAULTS: dict[str, dict[str, float]] = {
    "early-oscillation": {"warmup_steps": 5, "window": 40},
    "plateau": {"warmup_steps": 20, "window": 120},
    "data-starvation": {"min_steps": 20},
    "memory-swing": {"min_steps": 20},
}
_SUBWORD_MODELS = ("WordPiece", "BPE", "Unigram")
_MAX_COLUMNS = 64


def gather_facts(trainer: Any, label_check_rows: int = 0) -> RunFacts:
    """The run's facts from the Trainer's datamodule and any ``OrderValidator`` among its callbacks.

    Args:
        trainer: the Trainer.
        label_check_rows: without a validator (whose setup already ran it), read up to this many
            rows per split for the label-encoding check; ``0``: not here. Collective under DDP
            when it reads: every rank must call this at the same point.
    """
    from lightning_order.callbacks._labels import label_encoding_violations
    from lightning_order.callbacks.order_validator import OrderValidator

    dm = getattr(trainer, "datamodule", None)
    validators = [cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, OrderValidator)]
    found = [v for validator in validators for v in validator.violations]
    if not validators and label_check_rows > 0:
        found += label_encoding_violations(trainer, dm, label_check_rows)
    rules = {v.rule for v in found}
    encoded = [c for v in found if v.details.get("kind") == "label-encoding" for c in v.details["columns"]]
    ledger = _ledger(dm)
    steps = None
    if ledger is not None:
        steps = set(ledger.steps())
        if not validators:  # nobody judged the ledger yet: judge it here (pure, cheap)
            rules |= {v.rule for v in check_ledger(ledger, judged_pipeline(STANDARD_PIPELINE, ledger))}
    vocabulary, kind = _vocabulary(dm, ledger, validators)
    return RunFacts.of(
        world_size=int(getattr(trainer, "world_size", 1) or 1),
        validator=bool(validators),
        rules=rules,
        ledger_steps=steps,
        vocabulary=vocabulary,
        vocab_kind=kind,
        label_encoded=encoded,
    )


def _vocabulary(dm: Any, ledger: Any, validators: list[Any]) -> tuple[bool | None, str | None]:
    tokenizer = getattr(dm, "tokenizer", None) if dm is not None else None
    model = getattr(tokenizer, "model", None)
    if model is not None:
        name = type(model).__name__
        return True, "subword" if name in _SUBWORD_MODELS else ("word" if name == "WordLevel" else None)
    if isinstance(getattr(dm, "vocab", None), Mapping):
        return True, "word"  # a hand-written token -> id table: a word-level vocabulary
    if ledger is not None and ledger.has("build_vocab"):
        return True, None
    for validator in validators:
        dims = dict(getattr(validator, "dims", None) or {})
        observed = dict(getattr(validator, "_observed", None) or {})
        if "vocab_size" in dims or "max_token_id" in observed:
            return True, None
        if dims or observed:  # the validator saw the data's dims or a batch: no token ids in it
            return False, None
    return None, None


class InputStats:
    """Per-column sums of a batch's floating-point tensors, accumulated on the batch's device.

    Every float tensor with a batch dimension contributes its columns (a tensor of more than
    64 values per row contributes its row mean, one column); the layout is the same on every
    rank, so the per-rank vectors can be all-gathered and compared.
    """

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None
        self.batches = 0

    def add(self, batch: Any) -> None:
        """Adds one batch (a tensor, a mapping or a sequence of tensors)."""
        columns = [c for c in (_columns(t) for t in _tensors(batch)) if c is not None]
        if not columns:
            return
        x = torch.cat(columns, dim=1).detach().float()
        part = torch.stack([x.sum(0), (x * x).sum(0), torch.full_like(x[0], x.shape[0])])
        if self.sums is None or self.sums.shape != part.shape:
            self.sums = part
        else:
            self.sums = self.sums + part
        self.batches += 1

    def vector(self, width: int, device: torch.device) -> torch.Tensor:
        """``[mean..., std...]`` of ``width`` columns (NaN where unknown), on ``device``."""
        out = torch.full((2 * width,), float("nan"), device=device)
        if self.sums is None:
            return out
        sums = self.sums.to(device)[:, :width]
        count = sums[2].clamp(min=1)
        mean = sums[0] / count
        std = (sums[1] / count - mean * mean).clamp(min=0).sqrt()
        out[: mean.numel()] = mean
        out[width : width + std.numel()] = std
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


def monitor_metrics(
    diagnoses: int,
    waits: Iterable[float],
    steps: Iterable[float],
    unk_rate: float | None,
    rank_losses: Iterable[Sequence[float]],
    memory: Sequence[float],
    ranks: int,
) -> dict[str, float]:
    """The ``symptom/*`` metrics the monitor logs at each check."""
    metrics: dict[str, float] = {"symptom/diagnoses": float(diagnoses)}
    pairs = [(w, s) for w, s in zip(waits, steps) if w >= 0]
    if pairs:
        metrics["symptom/wait_share"] = sum(w / (w + s) if w + s > 0 else 0.0 for w, s in pairs) / len(pairs)
    if unk_rate is not None:
        metrics["symptom/unk_rate"] = unk_rate
    losses = list(rank_losses)
    if ranks > 1 and losses:
        columns = [[v for v in column if math.isfinite(v)] for column in zip(*losses)]
        means = [sum(c) / len(c) for c in columns if c]
        center = sum(means) / len(means) if means else 0.0
        if len(means) > 1 and center:
            metrics["symptom/rank_loss_spread"] = (max(means) - min(means)) / abs(center)
    if memory:
        metrics["symptom/memory_allocated_mib"] = memory[-1] / 2**20
    return metrics


def resolve_thresholds(
    symptoms: Iterable[str] | None, thresholds: Mapping[str, Mapping[str, float]] | None
) -> dict[str, dict[str, float]]:
    """The detectors' keyword arguments per symptom: the monitor's defaults, then the user's overrides.

    Raises:
        ValueError: a symptom code that is not in the table.
    """
    unknown = [s for s in [*(symptoms or []), *(thresholds or {})] if s not in SYMPTOMS]
    if unknown:
        raise ValueError(f"unknown symptom code(s) {unknown}; expected some of {', '.join(SYMPTOMS)}")
    return {
        code: {**_DETECTOR_DEFAULTS.get(code, {}), **(thresholds or {}).get(code, {})} for code in SYMPTOMS
    }


def kwargs_for(detector: Any, options: Mapping[str, float]) -> dict[str, float]:
    """The options ``detector`` takes (a symptom with two detectors splits its thresholds)."""
    accepted = inspect.signature(detector).parameters
    return {k: v for k, v in options.items() if k in accepted}


def seen_elsewhere(
    flags: Sequence[Sequence[float]], codes: Sequence[str], wanted: Sequence[str], step: int
) -> list[Diagnosis]:
    """Placeholders for the symptoms other ranks diagnosed (``flags[rank][i]`` for ``codes[i]``).

    Recorded on every rank so that all ranks take the same decisions; the numbers and the cause
    are in the warning of the rank that saw it.
    """
    out = []
    for index, code in enumerate(codes):
        ranks = [r for r, row in enumerate(flags) if row[index] > 0]
        if ranks and code in wanted:
            note = "seen on another rank; its numbers and cause are in that rank's warning"
            out.append(
                Diagnosis(code, step, None, {"ranks": ranks, "note": note}, f"rank(s) {ranks} saw {code}")
            )
    return out


def format_report(diagnoses: Sequence[Diagnosis], pause_path: str | None) -> str:
    """The diagnoses as readable text: what was seen, and which of it names an order error."""
    if not diagnoses:
        return "SymptomMonitor: no symptom seen."
    named = sum(d.names_order_error for d in diagnoses)
    lines = [f"SymptomMonitor: {len(diagnoses)} symptom(s) seen, {named} attributed to an order error:"]
    lines += [f"  {number}. {d.describe()}" for number, d in enumerate(diagnoses, start=1)]
    if pause_path:
        lines.append(f"  The run was paused: {pause_path}; see lightning_order.recover().")
    return "\n".join(lines)


def unk_id(dm: Any, unk_token: str, given: int | None) -> int | None:
    """The unknown token's id: ``given``, else asked from the datamodule's ``tokenizer``."""
    if given is not None:
        return given
    token_to_id = getattr(getattr(dm, "tokenizer", None), "token_to_id", None)
    return token_to_id(unk_token) if callable(token_to_id) else None


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


def log_metrics(trainer: Any, monitor: Any, ranks: int) -> None:
    """Sends the monitor's ``symptom/*`` metrics to the Trainer's loggers (global rank 0 only)."""
    if not trainer.loggers or not trainer.is_global_zero:
        return
    metrics = monitor_metrics(
        len(monitor.diagnoses),
        monitor._clock.waits,
        monitor._clock.steps,
        monitor._unk_rate,
        monitor._rank_losses,
        monitor._memory,
        ranks,
    )
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)

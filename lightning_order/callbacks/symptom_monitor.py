"""``SymptomMonitor``: diagnose order errors from training signals while ``fit`` runs.

The callback only gathers numbers and acts; the verdicts come from the pure detectors of
:mod:`lightning_order.checks.symptoms`. It is built to be cheap on a real cluster:

* losses are kept as detached tensors and converted to numbers once every
  ``check_every_n_steps`` steps (one host-device sync per check, none per step);
* every window is a bounded ``deque``; the unknown-token count is accumulated on the device;
* one all-gather of a small vector per check carries each rank's loss summary and the symptoms
  it saw, so every rank takes the same stop decision;
* timings use the host clock; memory readings use the allocator's host-side counter.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks.callback import Callback
from pytorch_lightning.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightning_order.checks.symptoms import (
    SYMPTOMS,
    Diagnosis,
    detect_data_starvation,
    detect_early_oscillation,
    detect_memory_swing,
    detect_plateau,
    detect_rank_divergence,
    detect_train_val_gap,
)
from lightning_order.errors import OrderWarning

__all__ = ["SymptomMonitor"]

_CODES = tuple(SYMPTOMS)
_DETECTOR_DEFAULTS: dict[str, dict[str, float]] = {
    "early-oscillation": {"warmup_steps": 5, "window": 40},
    "plateau": {"warmup_steps": 20, "window": 60},
    "data-starvation": {"min_steps": 20},
    "memory-swing": {"min_steps": 20},
}


class SymptomMonitor(Callback):
    """Watches training signals and names the order error behind a symptom.

    Symptoms (codes of :data:`~lightning_order.checks.symptoms.SYMPTOMS`) and their default
    thresholds (each one's meaning is in its detector's docstring; calibration figures are in
    ``docs/troubleshooting.md``):

    * ``early-oscillation`` (steps 5-45): at least 6 step-to-step changes above 50% of the median
      loss, at least half of them flipping sign, and a spread of at least 1x the median.
    * ``plateau``: after 20 warm-up steps, less than 2% improvement over 60 steps while still
      within 25% of the starting loss; or more than 0.2% unknown input tokens.
    * ``rank-divergence`` (DDP, from the per-rank per-step losses all-gathered every check, over
      the last ``divergence_window`` steps): the extreme ranks' paired step-by-step difference
      exceeds 5 standard errors and 15% of the mean loss, at ``divergence_patience`` checks in a
      row, after ``divergence_warmup_steps``.
    * ``train-val-gap`` (at each validation): validation loss at or below the recent train loss
      in each of the first 3 validations while the train loss halved and the validation loss
      fell at least 1/1.5 as fast (leakage); or validation loss at least 3x the train loss and
      0.5 nats above it (overfitting). The train loss is the mean of the last
      ``check_every_n_steps`` steps before the validation.
    * ``data-starvation``: over the last 20+ steps, a median of more than 50% of each step's wall
      time spent waiting for the batch, with a median wait above 20 ms.
    * ``memory-swing`` (CUDA only): a median step-to-step change of allocated memory above 25% of
      its median and above 256 MiB.

    Each symptom is diagnosed once per run. Override a threshold with ``thresholds``, e.g.
    ``SymptomMonitor(thresholds={"plateau": {"max_unk_rate": 0.1}})`` (keys: the detector's
    keyword arguments).

    Args:
        on_symptom: ``"warn"`` issues an :class:`~lightning_order.errors.OrderWarning` per
            diagnosis; ``"stop"`` pauses the run (a checkpoint with weights, optimizer state, the
            step reached, the ledger, the diagnoses and a waste report: see
            :func:`lightning_order.recovery.pause`), then stops every rank.
        check_every_n_steps: how often (in training batches) losses are converted, detectors run
            and ranks all-gather their loss summary.
        symptoms: the symptom codes to watch (default: all).
        thresholds: per-symptom overrides of the detectors' keyword arguments.
        divergence_patience: consecutive checks that must show ``rank-divergence``.
        divergence_warmup_steps: batches before ranks are compared (all start at the same loss).
        divergence_window: the steps of per-rank losses compared (the latest, all-gathered).
        unk_token: the unknown token's string, looked up in the datamodule's ``tokenizer``.
        unk_token_id: the unknown token's id, when there is no tokenizer to ask.
        val_metric: the logged validation loss compared with the train loss.
        checkpoint_dir: where a pause checkpoint goes (default:
            ``<trainer.default_root_dir>/lightning_order``).
        gpu_hour_price: price of one device-hour, for the waste report's cost.
        verbose: print the report at the end of fit.
    """

    def __init__(
        self,
        on_symptom: Literal["warn", "stop"] = "warn",
        check_every_n_steps: int = 10,
        symptoms: list[str] | None = None,
        thresholds: dict[str, dict[str, float]] | None = None,
        divergence_patience: int = 2,
        divergence_warmup_steps: int = 20,
        divergence_window: int = 30,
        unk_token: str = "[UNK]",
        unk_token_id: int | None = None,
        val_metric: str = "val_loss",
        checkpoint_dir: str | None = None,
        gpu_hour_price: float | None = None,
        verbose: bool = True,
    ) -> None:
        super().__init__()
        if on_symptom not in ("warn", "stop"):
            raise ValueError(f"on_symptom must be 'warn' or 'stop', got {on_symptom!r}")
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}")
        unknown = [s for s in (symptoms or []) + list(thresholds or {}) if s not in SYMPTOMS]
        if unknown:
            raise ValueError(f"unknown symptom code(s) {unknown}; expected some of {', '.join(SYMPTOMS)}")
        self.on_symptom = on_symptom
        self.check_every_n_steps = check_every_n_steps
        self.symptoms = tuple(symptoms) if symptoms is not None else _CODES
        self.thresholds = {
            code: {**_DETECTOR_DEFAULTS.get(code, {}), **(thresholds or {}).get(code, {})}
            for code in SYMPTOMS
        }
        self.divergence_patience = divergence_patience
        self.divergence_warmup_steps = divergence_warmup_steps
        self.divergence_window = divergence_window
        self.unk_token = unk_token
        self.unk_token_id = unk_token_id
        self.val_metric = val_metric
        self.checkpoint_dir = checkpoint_dir
        self.gpu_hour_price = gpu_hour_price
        self.verbose = verbose

        self.diagnoses: list[Diagnosis] = []
        #: the path of the pause checkpoint, once the monitor stopped the run.
        self.pause_path: str | None = None
        self._reset_windows()
        self._epoch_train: list[float] = []
        self._epoch_val: list[float] = []
        self._elapsed_before = 0.0
        self._fit_start: float | None = None

    # -- set-up ----------------------------------------------------------------------------
    def _reset_windows(self) -> None:
        osc, plat = self.thresholds["early-oscillation"], self.thresholds["plateau"]
        self._batches = 0
        self._pending: list[torch.Tensor] = []
        self._early: list[float] = []
        self._early_len = int(osc["warmup_steps"] + osc["window"])
        self._start: list[float] = []
        self._start_len = int(plat["warmup_steps"])
        self._recent: deque[float] = deque(maxlen=int(plat["window"]))
        self._waits: deque[float] = deque(
            maxlen=max(int(self.thresholds["data-starvation"]["min_steps"]), 50)
        )
        self._steps: deque[float] = deque(maxlen=self._waits.maxlen)
        self._memory: deque[float] = deque(maxlen=max(int(self.thresholds["memory-swing"]["min_steps"]), 50))
        self._unk: torch.Tensor | None = None
        self._tokens: torch.Tensor | None = None
        self._unk_rate: float | None = None
        self._batch_start: float | None = None
        self._last_end: float | None = None
        self._divergent_checks = 0
        self._rank_losses: deque[list[float]] = deque(maxlen=self.divergence_window)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            on_symptom=self.on_symptom, check_every_n_steps=self.check_every_n_steps
        )

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_start = time.perf_counter()
        if self.unk_token_id is None:
            tokenizer = (
                getattr(trainer.datamodule, "tokenizer", None) if trainer.datamodule is not None else None
            )
            token_to_id = getattr(tokenizer, "token_to_id", None)
            if callable(token_to_id):
                self.unk_token_id = token_to_id(self.unk_token)

    # -- gathering -------------------------------------------------------------------------
    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None  # the first batch of an epoch pays for starting the loader

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None  # validation time is no wait for a training batch

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._last_end is not None:
            self._waits.append(now - self._last_end)
        else:
            self._waits.append(-1.0)  # placeholder: keeps waits and step times aligned
        self._batch_start = now
        if self.unk_token_id is not None and "plateau" in self.symptoms and isinstance(batch, Mapping):
            self._count_unknown(batch)

    def _count_unknown(self, batch: Mapping[str, Any]) -> None:
        ids = batch.get("input_ids")
        if not isinstance(ids, torch.Tensor):
            return
        mask = batch.get("attention_mask")
        real = mask.bool() if isinstance(mask, torch.Tensor) else torch.ones_like(ids, dtype=torch.bool)
        unk = ((ids == self.unk_token_id) & real).sum()
        tokens = real.sum()
        # Accumulated on the batch's device; read once per check.
        self._unk = unk if self._unk is None else self._unk + unk
        self._tokens = tokens if self._tokens is None else self._tokens + tokens

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._batch_start is not None:
            self._steps.append(time.perf_counter() - self._batch_start)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(loss, torch.Tensor):
            self._pending.append(loss.detach().reshape(()).float())
        if pl_module.device.type == "cuda" and "memory-swing" in self.symptoms:
            self._memory.append(float(torch.cuda.memory_allocated(pl_module.device)))
        self._batches += 1
        if self._batches % self.check_every_n_steps == 0:
            self._check(trainer, pl_module)
        self._last_end = time.perf_counter()

    def _flush(self) -> list[float]:
        """Converts the pending loss tensors: the only host-device sync, once per check."""
        if not self._pending:
            return []
        values = torch.stack(self._pending).cpu().tolist()
        self._pending.clear()
        for value in values:
            if len(self._early) < self._early_len:
                self._early.append(value)
            if len(self._start) < self._start_len:
                self._start.append(value)
            self._recent.append(value)
        if self._unk is not None and self._tokens is not None:
            unk, tokens = (int(v) for v in torch.stack([self._unk, self._tokens]).cpu().tolist())
            self._unk_rate = unk / tokens if tokens else None
            self._unk = self._tokens = None
        return values

    # -- checking --------------------------------------------------------------------------
    def _local_checks(self, trainer: pl.Trainer) -> list[Diagnosis]:
        step = trainer.global_step
        found: list[Diagnosis | None] = []
        kw = self.thresholds
        if self._want("early-oscillation") and len(self._early) <= self._early_len:
            found.append(detect_early_oscillation(self._early, step=step, **kw["early-oscillation"]))
        if self._want("plateau") and len(self._start) >= self._start_len:
            seen = self._batches
            values = self._start + (list(self._recent) if seen >= self._start_len + len(self._recent) else [])
            found.append(detect_plateau(values, step=step, unk_rate=self._unk_rate, **kw["plateau"]))
        if self._want("data-starvation"):
            pairs = [(w, s) for w, s in zip(self._waits, self._steps) if w >= 0]
            found.append(
                detect_data_starvation(
                    [w for w, _ in pairs], [s for _, s in pairs], step=step, **kw["data-starvation"]
                )
            )
        if self._want("memory-swing") and self._memory:
            found.append(detect_memory_swing(list(self._memory), step=step, **kw["memory-swing"]))
        return [d for d in found if d is not None]

    def _want(self, code: str) -> bool:
        return code in self.symptoms and not any(d.symptom == code for d in self.diagnoses)

    def _check(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        values = self._flush()
        local = self._local_checks(trainer)
        # One small all-gather: this rank's losses of the last k steps and the symptoms it saw.
        k = self.check_every_n_steps
        recent = [math.nan] * (k - len(values[-k:])) + values[-k:]
        flags = [1.0 if any(d.symptom == code for d in local) else 0.0 for code in _CODES]
        vector = torch.tensor([*recent, *flags], device=pl_module.device, dtype=torch.float32)
        gathered = trainer.strategy.all_gather(vector)
        rows = gathered.reshape(-1, vector.numel()).cpu().tolist()
        for index in range(k):  # one entry per step: every rank's loss at that step
            self._rank_losses.append([row[index] for row in rows])

        diverged = None
        if self._want("rank-divergence") and len(rows) > 1 and self._batches >= self.divergence_warmup_steps:
            candidate = detect_rank_divergence(
                [list(column) for column in zip(*self._rank_losses)],
                step=trainer.global_step,
                **self.thresholds["rank-divergence"],
            )
            self._divergent_checks = self._divergent_checks + 1 if candidate else 0
            if self._divergent_checks >= self.divergence_patience:
                diverged = candidate
        new = list(local)
        if diverged is not None:
            new.append(diverged)
        # Symptoms other ranks saw and this one did not: recorded so that all ranks act alike.
        for index, code in enumerate(_CODES):
            ranks = [r for r, row in enumerate(rows) if row[k + index] > 0]
            if ranks and self._want(code) and not any(d.symptom == code for d in new):
                new.append(
                    Diagnosis(
                        code,
                        trainer.global_step,
                        SYMPTOMS[code].suspected_rule,
                        {
                            "ranks": ranks,
                            "note": "seen on another rank; its numbers are in that rank's warning",
                        },
                        f"rank(s) {ranks} saw {code}",
                    )
                )
        self._log(trainer, rows)
        self._act(trainer, new)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or "train-val-gap" not in self.symptoms:
            return
        self._flush()
        val = trainer.callback_metrics.get(self.val_metric)
        recent = list(self._recent)[-self.check_every_n_steps :]
        if val is None or not recent:
            return
        self._epoch_train.append(sum(recent) / len(recent))
        self._epoch_val.append(float(val))
        found = None
        if self._want("train-val-gap"):
            found = detect_train_val_gap(
                self._epoch_train,
                self._epoch_val,
                step=trainer.global_step,
                **self.thresholds["train-val-gap"],
            )
        # Every rank reaches validation end: take the decision together.
        anywhere = trainer.strategy.reduce_boolean_decision(found is not None, all=False)
        if anywhere and found is None and self._want("train-val-gap"):
            found = Diagnosis(
                "train-val-gap",
                trainer.global_step,
                SYMPTOMS["train-val-gap"].suspected_rule,
                {"note": "seen on another rank"},
                "another rank saw a train-val gap",
            )
        self._act(trainer, [found] if found is not None else [])

    # -- acting ----------------------------------------------------------------------------
    def _log(self, trainer: pl.Trainer, rows: list[list[float]]) -> None:
        if not trainer.loggers or not trainer.is_global_zero:
            return
        metrics: dict[str, float] = {"symptom/diagnoses": float(len(self.diagnoses))}
        pairs = [(w, s) for w, s in zip(self._waits, self._steps) if w >= 0]
        if pairs:
            metrics["symptom/wait_share"] = sum(w / (w + s) if w + s > 0 else 0.0 for w, s in pairs) / len(
                pairs
            )
        if self._unk_rate is not None:
            metrics["symptom/unk_rate"] = self._unk_rate
        if len(rows) > 1 and self._rank_losses:
            columns = [[v for v in column if math.isfinite(v)] for column in zip(*self._rank_losses)]
            means = [sum(c) / len(c) for c in columns if c]
            center = sum(means) / len(means) if means else 0.0
            if len(means) > 1 and center:
                metrics["symptom/rank_loss_spread"] = (max(means) - min(means)) / abs(center)
        if self._memory:
            metrics["symptom/memory_allocated_mib"] = self._memory[-1] / 2**20
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def _act(self, trainer: pl.Trainer, new: list[Diagnosis]) -> None:
        if not new:
            return
        self.diagnoses.extend(new)
        for diagnosis in new:
            if "note" not in diagnosis.evidence:
                warnings.warn(f"SymptomMonitor: {diagnosis.describe()}", OrderWarning, stacklevel=2)
        if self.on_symptom == "stop" and self.pause_path is None:
            from lightning_order.recovery import pause

            folder = Path(self.checkpoint_dir or Path(trainer.default_root_dir) / "lightning_order")
            path = folder / f"pause-step{trainer.global_step}.ckpt"
            self.pause_path = str(path)  # set first: the checkpoint carries this callback's state
            pause(trainer, path, reason=new, gpu_hour_price=self.gpu_hour_price, elapsed_s=self.elapsed_s)

    @property
    def elapsed_s(self) -> float:
        """Wall seconds spent in ``fit`` so far, including runs this one resumed."""
        running = time.perf_counter() - self._fit_start if self._fit_start is not None else 0.0
        return self._elapsed_before + running

    def report(self) -> str:
        """The diagnoses as readable text (what is printed at the end of fit)."""
        if not self.diagnoses:
            return "SymptomMonitor: no symptom of an order error seen."
        lines = [f"SymptomMonitor: {len(self.diagnoses)} symptom(s) of an order error:"]
        lines += [f"  {number}. {d.describe()}" for number, d in enumerate(self.diagnoses, start=1)]
        if self.pause_path:
            lines.append(f"  The run was paused: {self.pause_path}; see lightning_order.recover().")
        return "\n".join(lines)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.verbose:
            rank_zero_info(self.report())

    # -- checkpoint state ------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "epoch_train": list(self._epoch_train),
            "epoch_val": list(self._epoch_val),
            "start_losses": list(self._start),
            "elapsed_s": self.elapsed_s,
            "pause_path": self.pause_path,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.diagnoses = [Diagnosis.from_dict(d) for d in state_dict.get("diagnoses", [])]
        self._epoch_train = list(state_dict.get("epoch_train", []))
        self._epoch_val = list(state_dict.get("epoch_val", []))
        self._start = list(state_dict.get("start_losses", []))
        self._elapsed_before = float(state_dict.get("elapsed_s", 0.0))
        self.pause_path = state_dict.get("pause_path")

"""``SymptomMonitor``: diagnose order errors from training signals while ``fit`` runs.

The callback only gathers numbers and acts; the verdicts come from the pure detectors of
:mod:`lightning_order.checks.symptoms`. Cheap on a real cluster: losses stay detached tensors,
converted once every ``check_every_n_steps`` (one host-device sync per check, none per step;
the batches after the last check are judged at the end of training);
windows are bounded; unknown tokens and input statistics are summed on the device; one
all-gather of a small vector per check (each rank's recent losses and the symptoms it saw, so all
ranks decide alike), and under DDP one per validation (each rank's input statistics).
A symptom is attributed to an order error only where the run's facts separate the two
(:func:`~lightning_order.checks.symptoms.attribute`): what an ``OrderValidator`` in the same
Trainer found, the datamodule's ledger, whether the data keeps a vocabulary and of which kind.
"""

from __future__ import annotations

import math
import time
import warnings
from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks.callback import Callback
from pytorch_lightning.utilities.rank_zero import rank_zero_info
from typing_extensions import override

from lightning_order.callbacks.hooks import skip_unused_batch_hooks
from lightning_order.callbacks.monitor.detection import (
    input_shift,
    rank_divergence,
    resolve_thresholds,
    train_diagnoses,
    validation_gap,
)
from lightning_order.callbacks.monitor.facts import gather_facts, log_metrics, seen_elsewhere, unk_id
from lightning_order.callbacks.monitor.readings import InputStats, RankLosses, TrainReadings
from lightning_order.callbacks.monitor.step_clock import StepClock
from lightning_order.checks.report import format_diagnoses
from lightning_order.checks.symptoms import SYMPTOMS, Diagnosis, RunFacts, attribute
from lightning_order.errors import OrderWarning

__all__ = ["SymptomMonitor"]

_CODES = tuple(SYMPTOMS)
_INPUT_COLUMNS = 64  # input columns compared across ranks (a fixed width: one all-gather shape)
_TRAIN_WINDOW = 50  # train steps at most whose trend gives "the train loss" at a validation
_UNKNOWN_SAMPLES = 50  # the first train batches, whose unknown tokens are counted


class SymptomMonitor(Callback):
    """Watches training signals and names the order error behind a symptom.

    Symptoms (:data:`~lightning_order.checks.symptoms.SYMPTOMS`), each against the run's own
    baseline: early oscillation, a loss that does not fall or unknown tokens, ranks that differ
    (losses; validation inputs), train against validation (and, from the data, validation read
    through a label encoding fitted on validation rows), data starvation, memory swings. What
    each computes, its defaults and its false-alarm rate: ``docs/troubleshooting.md``. Each is
    diagnosed once per run; windows start afresh at every ``fit``. Override a threshold with
    ``thresholds``, e.g. ``{"plateau": {"max_unk_rate": 0.1}}`` (the detector's keywords).

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
            ``<trainer.default_root_dir>/lightning_order_pause``; never a folder named like the
            package, which would shadow it for imports run from there).
        gpu_hour_price: price of one device-hour, for the waste report's cost.
        verbose: print the report at the end of fit.
        label_check_rows: without an ``OrderValidator`` in the Trainer, rows per split the
            monitor reads once at the start of training for the label-encoding check (a target
            encoding fitted on validation rows, which no loss curve shows); ``0`` turns it off.
    """

    def __init__(
        self,
        on_symptom: Literal["warn", "stop"] = "warn",
        check_every_n_steps: int = 50,
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
        label_check_rows: int = 100_000,
    ) -> None:
        super().__init__()
        if on_symptom not in ("warn", "stop"):
            raise ValueError(f"on_symptom must be 'warn' or 'stop', got {on_symptom!r}")
        if check_every_n_steps < 1:
            raise ValueError(f"check_every_n_steps must be >= 1, got {check_every_n_steps}")
        self.on_symptom = on_symptom
        self.check_every_n_steps = check_every_n_steps
        self.symptoms = tuple(symptoms) if symptoms is not None else _CODES
        self.thresholds = resolve_thresholds(symptoms, thresholds)
        self.divergence_patience = divergence_patience
        self.divergence_warmup_steps = divergence_warmup_steps
        self.divergence_window = divergence_window
        self.unk_token = unk_token
        self.unk_token_id = unk_token_id
        self.val_metric = val_metric
        self.checkpoint_dir = checkpoint_dir
        self.gpu_hour_price = gpu_hour_price
        self.verbose = verbose
        self.label_check_rows = label_check_rows
        self._key: str | None = None
        skip_unused_batch_hooks(self)  # Lightning then dispatches two hooks a step to it, not six

        self._reset_run()

    # -- set-up ----------------------------------------------------------------------------
    def _reset_run(self) -> None:
        """A fresh run: no diagnoses, empty windows (a checkpoint's state is loaded after this)."""
        self.diagnoses: list[Diagnosis] = []
        #: the path of the pause checkpoint, once the monitor stopped the run.
        self.pause_path: str | None = None
        self._reset_windows()
        self._elapsed_before = 0.0
        self._fit_start: float | None = None
        self._facts: RunFacts | None = None
        self._seen: tuple[int, set[str]] = (0, set())
        #: per validation under DDP: the largest shift between the ranks' validation inputs.
        self.input_shifts: list[float | None] = []

    def _reset_windows(self) -> None:
        self._batches = 0
        self._readings = TrainReadings(self.thresholds)
        self._pending = self._readings.pending  # appended to at every batch's end
        self._unk_id: int | None = self.unk_token_id
        self._cuda = False
        self._count_unknown = False
        self._clock = StepClock(max(int(self.thresholds["data-starvation"]["min_steps"]), 50))
        self._marks = self._clock.marks  # appended to at every batch's start and end
        self._memory: deque[float] = deque(maxlen=max(int(self.thresholds["memory-swing"]["min_steps"]), 50))
        self._ranks = RankLosses(self.divergence_window, self.check_every_n_steps)
        self._val_inputs = InputStats()

    @property
    def readings(self) -> TrainReadings:
        """What the monitor has read from the train batches of this fit (losses, unknown tokens,
        the losses at each validation): a view for inspection, written by the monitor alone."""
        return self._readings

    @property
    def facts(self) -> RunFacts | None:
        """What the monitor knows about the run besides its signals (read at the start of training)."""
        return self._facts

    @property
    @override
    def state_key(self) -> str:
        # Lightning asks for it at every hook call: built once from the identifying arguments.
        if self._key is None:
            self._key = self._generate_state_key(
                on_symptom=self.on_symptom, check_every_n_steps=self.check_every_n_steps
            )
        return self._key

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Before Lightning restores callback states: a resumed run gets its state back after this.
        if stage == "fit":
            self._reset_run()

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_start = time.perf_counter()
        self._unk_id = unk_id(trainer.datamodule, self.unk_token, self.unk_token_id)  # type: ignore[attr-defined]
        self._cuda = pl_module.device.type == "cuda" and "memory-swing" in self.symptoms
        self._count_unknown = self._unk_id is not None and "plateau" in self.symptoms

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After every callback's on_fit_start (the validator's late checks) and on every rank at
        # once: the facts may all-gather the splits for the label-encoding check.
        self._facts = gather_facts(trainer, self.label_check_rows)

    # -- gathering -------------------------------------------------------------------------
    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clock.pause()  # the first batch of an epoch pays for starting the loader
        self._readings.new_stretch()  # rows come round again: the train loss steps down here

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clock.pause()  # validation time is no wait for a training batch
        self._val_inputs = InputStats()

    @override
    def on_validation_batch_start(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._compare_inputs(trainer) and not trainer.sanity_checking:
            self._val_inputs.add(batch)

    def _compare_inputs(self, trainer: pl.Trainer) -> bool:
        return trainer.world_size > 1 and "rank-divergence" in self.symptoms

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # Per step: a clock reading and an append at each end; everything else waits for the check.
        self._marks.append(time.perf_counter())
        if self._count_unknown and self._unk_id is not None:  # the one implies the other
            # Unknown tokens are counted on the first _UNKNOWN_SAMPLES batches (a precise rate
            # for the first verdict: ~0.3 % against a 0.2 % threshold needs tens of thousands of
            # tokens), then no more: the vocabulary and the data do not change during a run.
            self._readings.unknown.add(batch, self._unk_id)
            self._count_unknown = self._readings.unknown.batches < _UNKNOWN_SAMPLES

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._marks.append(time.perf_counter())
        loss = outputs.get("loss") if type(outputs) is dict else outputs
        if not isinstance(loss, torch.Tensor) and isinstance(loss, Mapping):  # a mapping, not a dict
            loss = loss.get("loss")
        if isinstance(loss, torch.Tensor):
            # Kept on the device, converted once per check. Lightning's automatic optimisation
            # hands over a detached copy already; a manual training_step's loss is detached here.
            self._pending.append(loss.detach() if loss.requires_grad else loss)
        if self._cuda:
            self._memory.append(float(torch.cuda.memory_allocated(pl_module.device)))
        self._batches += 1
        if self._batches % self.check_every_n_steps == 0:
            self._check(trainer, pl_module)
            self._clock.resume_at(time.perf_counter())  # the check's time is no wait for the next batch

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The batches since the last check are judged too: a run shorter than one check interval
        # still gets its verdicts (every rank reaches this point, so the all-gather is safe).
        if self._pending:
            self._check(trainer, pl_module)

    # -- checking --------------------------------------------------------------------------
    def _local_checks(self, trainer: pl.Trainer) -> list[Diagnosis]:
        found = train_diagnoses(
            self._readings,
            self._clock,
            self._memory,
            batches=self._batches,
            step=trainer.global_step,
            options=self.thresholds,
            wanted=self._want,
            subword=self._run_facts(trainer).vocab_kind == "subword",
        )
        return self._attributed(trainer, found)

    def _run_facts(self, trainer: pl.Trainer) -> RunFacts:
        """The run's facts, read once at the start of training (here only when that was skipped)."""
        if self._facts is None:
            self._facts = gather_facts(trainer)
        return self._facts

    def _attributed(self, trainer: pl.Trainer, found: list[Diagnosis | None]) -> list[Diagnosis]:
        facts = self._run_facts(trainer)
        out = [attribute(d, facts) for d in found if d is not None]
        return [d for d in out if d is not None]

    def _want(self, code: str) -> bool:
        if len(self.diagnoses) != self._seen[0]:  # the diagnosed symptoms, recounted when they change
            self._seen = (len(self.diagnoses), {d.symptom for d in self.diagnoses})
        return code in self.symptoms and code not in self._seen[1]

    def _check(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._clock.read()
        values = self._readings.flush()
        new = self._local_checks(trainer)
        if trainer.world_size > 1:  # on one process there is nothing to gather or compare
            new += self._across_ranks(trainer, pl_module, values, new)
        log_metrics(trainer, len(self.diagnoses), self._clock, self._readings, self._ranks, self._memory)
        self._act(trainer, new)

    def _across_ranks(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, values: list[float], local: list[Diagnosis]
    ) -> list[Diagnosis]:
        """One small all-gather: this rank's losses of the last k steps and the symptoms it saw."""
        flags = [1.0 if any(d.symptom == code for d in local) else 0.0 for code in _CODES]
        vector = self._ranks.vector(values, flags, pl_module.device)
        gathered = self._ranks.add(
            trainer.strategy.all_gather(vector).reshape(-1, vector.numel()).cpu().tolist()
        )
        diverged = None
        if self._want("rank-divergence") and self._batches >= self.divergence_warmup_steps:
            step, patience = trainer.global_step, self.divergence_patience
            diverged = rank_divergence(self._ranks, step=step, options=self.thresholds, patience=patience)
        new = self._attributed(trainer, [diverged])
        # Symptoms other ranks saw and this one did not: recorded so that all ranks act alike.
        wanted = [c for c in _CODES if self._want(c) and not any(d.symptom == c for d in [*local, *new])]
        return new + seen_elsewhere(gathered, _CODES, wanted, trainer.global_step)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        found = self._input_shift(trainer, pl_module)
        if "train-val-gap" in self.symptoms:
            found += self._train_val_gap(trainer)
        self._act(trainer, found)

    def _input_shift(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[Diagnosis]:
        """Under DDP: the ranks' validation input statistics against each other (shares of one split)."""
        if not self._compare_inputs(trainer) or not self._want("rank-divergence"):
            return []
        vector = self._val_inputs.vector(_INPUT_COLUMNS, pl_module.device)
        rows = trainer.strategy.all_gather(vector).reshape(-1, vector.numel()).cpu().tolist()
        measured, shift = input_shift(rows, _INPUT_COLUMNS, step=trainer.global_step, options=self.thresholds)
        self.input_shifts.append(measured)
        return self._attributed(trainer, [shift])

    def _train_val_gap(self, trainer: pl.Trainer) -> list[Diagnosis]:
        readings = self._readings
        if not readings.add_validation(trainer.callback_metrics.get(self.val_metric), _TRAIN_WINDOW):
            return []
        found = None
        if self._want("train-val-gap"):
            label_encoded = self._run_facts(trainer).label_encoded
            gap = validation_gap(readings, label_encoded, step=trainer.global_step, options=self.thresholds)
            if label_encoded:  # the data's evidence, known to every rank: no decision to share
                return self._attributed(trainer, [gap])
            found = next(iter(self._attributed(trainer, [gap])), None)
        # Every rank reaches validation end: take the decision together.
        anywhere = trainer.strategy.reduce_boolean_decision(found is not None, all=False)
        if anywhere and found is None and self._want("train-val-gap"):
            return seen_elsewhere([[1.0]], ["train-val-gap"], ["train-val-gap"], trainer.global_step)
        return [found] if found is not None else []

    # -- acting ----------------------------------------------------------------------------
    def _act(self, trainer: pl.Trainer, new: list[Diagnosis]) -> None:
        if not new:
            return
        self.diagnoses.extend(new)
        for diagnosis in new:
            if "note" not in diagnosis.evidence:
                warnings.warn(f"SymptomMonitor: {diagnosis.describe()}", OrderWarning, stacklevel=2)
        if self.on_symptom == "stop" and self.pause_path is None:
            from lightning_order.recovery.emergency import pause, pause_path

            path = pause_path(trainer.default_root_dir, trainer.global_step, self.checkpoint_dir)
            self.pause_path = str(path)  # set first: the checkpoint carries this callback's state
            pause(trainer, path, reason=new, gpu_hour_price=self.gpu_hour_price, elapsed_s=self.elapsed_s)

    @property
    def elapsed_s(self) -> float:
        """Wall seconds spent in ``fit`` so far, including runs this one resumed."""
        running = time.perf_counter() - self._fit_start if self._fit_start is not None else 0.0
        return self._elapsed_before + running

    def report(self) -> str:
        """The diagnoses as readable text (what is printed at the end of fit)."""
        return format_diagnoses(self.diagnoses, self.pause_path)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.verbose:
            rank_zero_info(self.report())

    # -- checkpoint state ------------------------------------------------------------------
    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "epoch_train": list(self._readings.epoch_train),
            "train_spread": list(self._readings.train_spread),
            "epoch_val": list(self._readings.epoch_val),
            "start_losses": list(self._readings.start),
            "elapsed_s": self.elapsed_s,
            "pause_path": self.pause_path,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.diagnoses = [Diagnosis.from_dict(d) for d in state_dict.get("diagnoses", [])]
        self._readings.epoch_train = list(state_dict.get("epoch_train", []))
        # Older states kept a mean of the last steps and no spread: never judged as leakage (inf).
        spread = state_dict.get("train_spread", [math.inf] * len(self._readings.epoch_train))
        self._readings.train_spread = list(spread)
        self._readings.epoch_val = list(state_dict.get("epoch_val", []))
        self._readings.start = list(state_dict.get("start_losses", []))
        self._elapsed_before = float(state_dict.get("elapsed_s", 0.0))
        self.pause_path = state_dict.get("pause_path")

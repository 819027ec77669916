"""``OrderValidator``: proves the data order before the first optimizer step, or stops the run.

The callback only gathers and acts: at each phase of a run it gathers the evidence once and runs
what :mod:`lightning_order.checks.registry` holds for the phase (:func:`.gather.run_phase`: every
check's judge is a pure function, the verdict agreed across ranks in one all-gather). The phases,
and why there:

- ``setup`` (after the datamodule's own ``setup``, on every rank): the ledger and the data's
  dims and fingerprints, sampled rows and, for a datamodule without a ledger, a content sample
  for checkpoints; the registered ``setup`` checks (the ledger against its pipeline, overlap,
  label encoding, the ranks' data), so every rank decides on the same data and raises together
  instead of leaving the others hanging in a collective.
- ``resume``: Lightning restores weights after ``setup`` and before ``on_fit_start``. The
  validator wraps the strategy's ``load_model_state_dict`` (and ``load_checkpoint``, where a
  distributed checkpoint folder's shards load: :mod:`.resume`) for the duration of the run, so
  the ``resume`` checks compare the checkpoint's stored data with this run's just before the
  weights are loaded: a changed vocabulary surfaces as ``resume-data-changed``, not as a raw size
  mismatch. When ``trainer.ckpt_path`` is already known in ``setup`` (set by the user), they run there.
- ``fit-start`` (``on_fit_start``, after ``configure_model`` and the restore; or the start of
  ``validate``/``test``): the model's dims against the data's, an LM run's rows and tokenizer, a
  restored state no file showed first, the checkpoint's loader states (fatal).
- ``train-start`` (the train loader restored, no batch drawn yet): where a resumed loader
  continues (``resume-position``), what each rank reads; the ``train`` record notes it.
- step 1 (hooks installed at ``on_train_batch_start`` of batch 0, judged at
  ``on_before_optimizer_step``, or ``on_train_batch_end`` of the first micro-batch): what the
  model received and was trained against (:mod:`.step_one`); the label and token rules that the
  sampled batches could only guess are decided there, and a guess the step did not decide is
  only warned (:func:`~lightning_order.checks.step_one.judge_step_one`). The step-1 verdict is
  agreed across ranks by its own all-gather; its judge is pure. After step 1 the batch hooks
  return at once.

What a hook leaves for a later one (this run's data, how a checkpoint showed itself, the checks
done) is one :class:`~lightning_order.callbacks.validator.state.ValidatorState`, replaced by every
``setup``. Other callbacks read what it found through
:class:`~lightning_order.checks.registry.CheckReport`.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Mapping
from functools import cached_property, partial
from types import MappingProxyType
from typing import Any, Literal

import pytorch_lightning as pl
from pytorch_lightning.utilities.rank_zero import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_order.callbacks.hooks import resume_calling, skip_unused_batch_hooks, stop_calling
from lightning_order.callbacks.validator.content import sampled_evidence
from lightning_order.callbacks.validator.evidence import (
    data_dims,
    data_fingerprints,
    datamodule_ledger,
    model_dims,
    phase_evidence,
    restore_violations,
)
from lightning_order.callbacks.validator.gather import PhaseResult, agree, all_gather, run_phase
from lightning_order.callbacks.validator.lm import is_hf_model, tokenizer_in_use
from lightning_order.callbacks.validator.resume import (
    content_sample,
    guard_restore,
    loaders_content_sample,
    release_restore,
    resume_point,
    resumed_at,
    saved_position,
    stored_content,
    tie_sharded_saves,
)
from lightning_order.callbacks.validator.state import CheckpointSeen, Done, ValidatorState, saved_state
from lightning_order.callbacks.validator.step_one import StepOneObserver, StepOneWatch
from lightning_order.checkpoint import early_checkpoint
from lightning_order.checks.lm import fit_fixes_to_model
from lightning_order.checks.loader_states import stored_loader_states
from lightning_order.checks.position_counts import stored_loop_count
from lightning_order.checks.registry import Phase
from lightning_order.checks.report import format_report, merge_violations
from lightning_order.checks.resume import stored_fingerprints, stored_position
from lightning_order.checks.step_one import StepOne, TokenFacts, Verdict, judge_step_one
from lightning_order.compat import Callback
from lightning_order.errors import CheckpointError, OrderError, OrderWarning
from lightning_order.ledger import CHECKPOINT_KEY, fingerprint
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.pipelines import all_dims
from lightning_order.rules import Violation

__all__ = ["OrderValidator"]

log = logging.getLogger(__name__)


#: The hooks that watch step 1 (skipped by Lightning once it is judged, until the next fit).
_STEP_ONE_HOOKS = ("on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end")


class OrderValidator(Callback):
    """Checks the order of data preparation and model set-up before step 1; raises or warns.

    Examples:
        >>> from pytorch_lightning import Trainer
        >>> trainer = Trainer(callbacks=[OrderValidator(planned_hours=12, gpu_hour_price=2.5)])  # doctest: +SKIP

    Args:
        on_violation: ``"raise"`` an :class:`~lightning_order.errors.OrderError` on every rank
            (the run stops before any optimizer step), or ``"warn"`` with an
            :class:`~lightning_order.errors.OrderWarning` and carry on.
        pipeline: the pipeline the ledger is judged against (extend it for your own steps).
        planned_hours: how long the run is planned to train, for the waste estimate.
        gpu_hour_price: the price of one device-hour, for the waste estimate.
        sample_rows: rows sampled per rank for feature statistics and, for datamodules without
            dims or key hashes, for the dims and overlap checks.
        overlap_max_rows: key hashes compared per split at most (bounded cost); larger splits are
            subsampled by hash value, which keeps a shared key on both sides or neither: a
            systematic leak is still found, a single duplicated row with the sampling rate.
        record: append the model and loop steps (``init_model``, ``configure_optimizers``,
            ``train``, ``evaluate``) to the datamodule's ledger.
        overlap_threshold: for datamodules without key hashes, the largest share of validation
            rows with an identical train twin that passes (reported whatever the train split's
            own repeat rate); ``1.0`` turns the check off.
        whole_rows: splits up to this many items are hashed whole (exact overlap and rank
            comparisons); larger ones through ``sample_rows`` items at the same indices per rank.
        label_check_rows: rows per split and rank read for the label-encoding check (a target
            encoding fitted on train + validation rows is ``fit-before-split``; see
            :func:`~lightning_order.checks.label_encoding.check_label_encoded_features`); larger
            splits are sampled, which weakens the check; ``0`` turns it off.

    Attributes:
        violations: what the latest check found (also in warn mode), identical on every rank.
        sampled_warnings: what sampled batches suggested and step 1 did not decide: warned
            (an :class:`~lightning_order.errors.OrderWarning` with its evidence), never raised.
    """

    def __init__(
        self,
        on_violation: Literal["raise", "warn"] = "raise",
        pipeline: Pipeline = STANDARD_PIPELINE,
        planned_hours: float | None = None,
        gpu_hour_price: float | None = None,
        sample_rows: int = 512,
        overlap_max_rows: int = 262_144,
        record: bool = True,
        overlap_threshold: float = 0.01,
        whole_rows: int = 20_000,
        label_check_rows: int = 100_000,
    ) -> None:
        super().__init__()
        if on_violation not in ("raise", "warn"):
            raise ValueError(f"on_violation must be 'raise' or 'warn', got {on_violation!r}")
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"pipeline must be a Pipeline, got {type(pipeline).__name__}")
        if sample_rows < 1 or overlap_max_rows < 1:
            raise ValueError(
                f"sample_rows and overlap_max_rows must be at least 1, got {sample_rows} and {overlap_max_rows}"
            )
        self.on_violation, self.pipeline, self.record = on_violation, pipeline, record
        self.planned_hours, self.gpu_hour_price = planned_hours, gpu_hour_price
        self.sample_rows, self.overlap_max_rows = sample_rows, overlap_max_rows
        if not 0.0 <= overlap_threshold <= 1.0 or whole_rows < 0:
            raise ValueError(
                f"overlap_threshold must be in [0, 1] and whole_rows at least 0, got {overlap_threshold} "
                f"and {whole_rows}"
            )
        self.overlap_threshold, self.whole_rows = overlap_threshold, whole_rows
        if label_check_rows < 0:
            raise ValueError(f"label_check_rows must be at least 0, got {label_check_rows}")
        self.label_check_rows = label_check_rows
        self.violations: list[Violation] = []
        self.sampled_warnings: list[Violation] = []
        # Step 1's observation: nothing pending until the model check of a fit sets it up.
        self._step_one = StepOneWatch(judged=True)
        # State (saved in checkpoints, restored as saved): the data the weights were trained on.
        self.fingerprints: dict[str, str] = {}
        self.dims: dict[str, Any] = {}
        #: Without a ledger: the tokenizer's fingerprint and item hashes of each split (resume proof).
        self.content: dict[str, Any] = {}
        #: The data position (epoch, global samples of it consumed, seed, global batch, ...): the one
        #: a restored checkpoint held, then this run's as of its latest save.
        self.position: dict[str, Any] | None = None
        # What this run learnt in its hooks (this run's data, the checkpoint as it showed itself,
        # the checks done), for its later hooks; never saved.
        self._state = ValidatorState()
        skip_unused_batch_hooks(self)  # its checks run before step 1: Lightning need not call it per batch
        stop_calling(self, *_STEP_ONE_HOOKS)  # until a fit's start sets up the watch of its step 1

    @property
    def observed(self) -> Mapping[str, Any]:
        """What sampled batches showed about the data's dims, for a datamodule without ``dims``
        (``max_token_id``, ``num_features``, ``max_label``; lower bounds), read-only; empty otherwise."""
        return MappingProxyType(self._state.observed)

    @property
    def evidence(self) -> Mapping[str, Any]:
        """What the latest checks had to go on, read-only: ``overlap`` (what the overlap check compared,
        :func:`~lightning_order.callbacks.validator.overlap.overlap_check`) and ``label_encoding`` (whether
        the label-encoding check gave a verdict) and, under DDP, ``same_rows_floats`` (whether the
        float columns of the same rows were compared across ranks): each registered check's ``facts``.
        ``SymptomMonitor`` reads it (through :class:`~lightning_order.checks.registry.CheckReport`) to
        rule causes out."""
        return MappingProxyType(self._state.evidence)

    # -- identity and state ----------------------------------------------------------------
    @cached_property
    @override
    def state_key(self) -> str:
        # Lightning reads the key in every hook call (profiler labels), so it is computed once.
        # The pipeline identifies what was validated; raise/warn and the cost inputs do not.
        pipeline_id = fingerprint([s.name for s in self.pipeline], repr(self.pipeline))[:12]
        return self._generate_state_key(pipeline=pipeline_id)

    @override
    def state_dict(self) -> dict[str, Any]:
        # Plain strings and ints only: the checkpoint loads with weights_only=True.
        trainer = self._state.trainer() if self._state.trainer is not None else None
        live = saved_position(trainer) if trainer is not None else None
        self.position = live or self.position  # the latest position saved (outside a fit: kept)
        state: dict[str, Any] = {"fingerprints": dict(self.fingerprints), "dims": dict(self.dims)}
        optional = {"position": self.position, "content": self.content}  # absent when there is none
        return {**state, **{key: dict(value) for key, value in optional.items() if value}}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Exactly what state_dict saved, older states defaulted; anything else raises CheckpointError.
        self.fingerprints, self.dims, self.position, self.content = saved_state(state_dict)
        self._state.seen.add(CheckpointSeen.STATE)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Outside the callback's own state too, so tools (recover, audit) find the data's identity
        # without knowing this callback's state key.
        saved = checkpoint.setdefault(CHECKPOINT_KEY, {})
        saved["fingerprints"] = dict(self.fingerprints)
        saved["position"] = saved_position(trainer)
        ledger = datamodule_ledger(trainer.datamodule)  # type: ignore[attr-defined]  # set by Lightning, undeclared
        if ledger is not None:
            saved["ledger"] = ledger.state_dict()

    # -- the checks ------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.violations = []
        # A fresh state: a checkpoint of this run is restored after setup, never before. The
        # weight-restore guard outlives it (teardown or an exception removes it).
        self._state = state = ValidatorState(trainer=weakref.ref(trainer), guarded=self._state.guarded)
        dm = trainer.datamodule  # type: ignore[attr-defined]  # set by Lightning, undeclared
        ledger = datamodule_ledger(dm)
        self.fingerprints = data_fingerprints(dm)
        self.dims = data_dims(dm)
        state.fingerprints, state.dims = dict(self.fingerprints), dict(self.dims)
        # Any datamodule without fingerprints and dims: what its datasets hold, same indices per rank.
        plain = dm is not None and not (self.fingerprints and self.dims)
        train_sample, state.observed, content = sampled_evidence(
            trainer, dm, plain=plain, dims=self.dims, sample_rows=self.sample_rows, whole_rows=self.whole_rows
        )
        # Compared across ranks, and with the model check's: a token added from here on is a change.
        content["tokenizer"] = state.tokenizer = tokenizer_in_use(dm)
        # No ledger to prove the data on resume: its tokenizer and sampled items go into checkpoints.
        self.content = state.content = content_sample(trainer, dm, state.tokenizer) if ledger is None else {}
        if ledger is None and dm is not None:
            rank_zero_info(
                f"OrderValidator: {type(dm).__name__} keeps no ledger; checking dims, ranks and overlap "
                "from sampled batches (OrderedDataModule's ledger would allow the full order check)"
            )
        elif dm is None:
            rank_zero_info("OrderValidator: no datamodule; only the model and resume checks run")
        samples = {"train": train_sample[0], "train_size": train_sample[1], "content": content}
        where = f"OrderValidator.setup ({getattr(stage, 'value', stage)})"
        self._run(trainer, Phase.SETUP, pl_module, where, samples=samples)

        try:  # known this early only when the user set trainer.ckpt_path to a file
            checkpoint = early_checkpoint(trainer.ckpt_path)
        except CheckpointError:
            self._unguard()
            raise  # truncated, empty or not a checkpoint: one line now, not Lightning's traceback later
        if checkpoint is not None:
            self._check_checkpoint(trainer, checkpoint)
        self._guard_weight_restore(trainer)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._late_checks(trainer, pl_module, "OrderValidator.on_fit_start")
        ledger = datamodule_ledger(trainer.datamodule)  # type: ignore[attr-defined]  # set by Lightning, undeclared
        if self.record and ledger is not None:
            encode = ledger.latest("encode")
            init = ledger.record(
                "init_model",
                inputs={"encode": encode.output if encode else None},
                params={k: v for k, v in model_dims(pl_module).items() if k in all_dims()},
            )
            # Lightning's strategy set-up (before this hook) already called configure_optimizers.
            ledger.record("configure_optimizers", inputs={"init_model": init.output})

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != "fit":
            fn = getattr(trainer.state.fn, "value", trainer.state.fn)
            self._late_checks(trainer, pl_module, f"OrderValidator (start of {fn})")

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_start(trainer, pl_module)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The loader is restored and no batch is drawn: where a resumed one continues, what each rank reads.
        resumed = resume_point(trainer) if self._state.resuming else None
        stored = self._state.stored_position or self.position
        checkpoint = {"position": stored, "resumed": resumed} if self._state.resuming else None
        stored_content = self._sample_fit_loaders(trainer)
        if checkpoint is not None and stored_content is not None:  # judged by resume-data-changed
            checkpoint |= {"fingerprints": dict(self.fingerprints), "content": stored_content}
        result = self._run(
            trainer, Phase.TRAIN_START, pl_module, "OrderValidator (before step 1)", checkpoint=checkpoint
        )
        # What the loader's workers serve (rows-served-twice): proof stopped the run above, a suspicion warns.
        for doubt in result.facts.get("rows_served_suspected", ()):
            rank_zero_warn(f"OrderValidator: {doubt.describe()}", category=OrderWarning)
        ledger = datamodule_ledger(trainer.datamodule)  # type: ignore[attr-defined]  # set by Lightning, undeclared
        if self.record and ledger is not None:
            shard, optim = ledger.latest("shard"), ledger.latest("configure_optimizers")
            at = resumed_at(resumed, int(trainer.global_step)) if resumed else None
            ledger.record(
                "train",
                inputs={
                    "shard": shard.output if shard else None,
                    "configure_optimizers": optim.output if optim else None,
                },
                stats={"resumed_at": at} if at is not None else None,
            )

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        ledger = datamodule_ledger(trainer.datamodule)  # type: ignore[attr-defined]  # set by Lightning, undeclared
        done = self._state.done
        if not self.record or ledger is None or trainer.sanity_checking or Done.EVALUATE_RECORDED in done:
            return
        train = ledger.latest("train")
        if train is None:  # validating a model this ledger never saw trained: nothing to record
            return
        ledger.record("evaluate", inputs={"train": train.output})
        done.add(Done.EVALUATE_RECORDED)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        watch = self._step_one
        if watch.judged or watch.observer is not None:
            return
        if trainer.global_step != 0 or batch_idx != 0:  # a resumed fit: no step 1 to watch
            self._judge_step_one(trainer)
            return
        watch.observer = StepOneObserver(pl_module, on_overflow=partial(self._overflow, trainer))
        watch.observer.install()

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        self._judge_step_one(trainer)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Manual optimization without a step, or the first micro-batch of gradient accumulation.
        self._judge_step_one(trainer)

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._unguard()
        self._unwatch()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._unguard()
        self._unwatch()

    # -- helpers ---------------------------------------------------------------------------
    def _run(
        self, trainer: pl.Trainer, phase: Phase, pl_module: Any, where: str, **given: Any
    ) -> PhaseResult:
        """The registered checks of ``phase`` on this run's evidence and ``given``'s; raises or warns."""
        settings = {
            "sample_rows": self.sample_rows,
            "overlap_max_rows": self.overlap_max_rows,
            "overlap_threshold": self.overlap_threshold,
            "whole_rows": self.whole_rows,
            "label_check_rows": self.label_check_rows,
        }
        evidence = phase_evidence(trainer, phase, pl_module, self._state, self.pipeline, settings, **given)
        result = run_phase(trainer, phase, evidence)
        self._state.evidence.update(result.facts)  # before acting: also readable after a raise
        violations = result.violations
        if phase is Phase.FIT_START:  # resize_token_embeddings for HF models
            violations = fit_fixes_to_model(violations, is_hf_model(pl_module))
        self._act(trainer, violations, where, fatal=result.fatal)
        return result

    def _late_checks(self, trainer: pl.Trainer, pl_module: pl.LightningModule, where: str) -> None:
        """The ``fit-start`` checks: the model's dims (and an LM run's), a restored state no file showed.

        The guard stays in place: strategies with ``restore_checkpoint_after_setup`` restore the
        weights after ``on_fit_start``; ``teardown`` removes it.
        """
        state = self._state
        if Done.MODEL_CHECKED in state.done:
            return
        state.done.add(Done.MODEL_CHECKED)
        checkpoint: dict[str, Any] = {}
        if state.resume_unchecked:  # the callback's state is the checkpoint's: its data against this run's
            checkpoint |= {"fingerprints": dict(self.fingerprints), "content": dict(self.content)}
            state.done.add(Done.RESUME_CHECKED)
        if state.loader_states and trainer.state.fn == "fit":  # judged before Lightning restores them
            checkpoint["loader_states"] = state.loader_states
        result = self._run(trainer, Phase.FIT_START, pl_module, where, checkpoint=checkpoint or None)
        # An LM run's guesses from sampled rows wait for step 1, which decides or warns them.
        self._step_one = StepOneWatch(
            list(result.facts.get("lm_sampled_guesses", ())),
            result.facts.get("lm_token_facts") or TokenFacts(),
        )
        resume_calling(self, *_STEP_ONE_HOOKS)  # this fit's step 1 is watched
        if trainer.state.fn != "fit":
            self._judge_step_one(trainer)  # no training step to watch

    def _sample_fit_loaders(self, trainer: pl.Trainer) -> dict[str, Any] | None:
        """Without a datamodule, the content sample of the loaders passed to ``fit`` (set up by now).

        Returns the content sample the restored checkpoint held (``{}``: none), to be judged against
        this run's; ``None`` when there is nothing to sample (a datamodule sampled at ``setup``).
        """
        if trainer.datamodule is not None:  # type: ignore[attr-defined]  # set by Lightning, undeclared
            return None
        content = loaders_content_sample(trainer, self._state.tokenizer)
        if not content["splits"]:
            return None
        stored = dict(self.content) if self._state.resuming else {}  # the checkpoint's, restored
        self.content = self._state.content = content
        return stored

    def _judge_step_one(self, trainer: pl.Trainer) -> None:
        """Removes the observer and judges step 1; sampled guesses it did not decide are warned.

        Collective under DDP (every rank reaches it at the same hook of the same step).
        """
        watch = self._step_one
        if watch.judged:
            return
        watch.judged = True
        stop_calling(self, *_STEP_ONE_HOOKS)  # judged: Lightning need not call them on later batches
        observer, watch.observer = watch.observer, None
        verdict = Verdict([], frozenset())
        if observer is not None:
            observer.remove()
            verdict = judge_step_one(observer.observation(), watch.facts)
        guesses = [v.to_dict() for v in watch.sampled if v.rule not in verdict.decided]
        gathered = all_gather(
            trainer, {"found": [v.to_dict() for v in verdict.violations], "guesses": guesses}
        )
        self.sampled_warnings = agree([g["guesses"] for g in gathered])
        if self.sampled_warnings and trainer.is_global_zero:
            header = "OrderValidator: not proven (read from sampled batches only, step 1 did not show it):"
            warnings.warn(str(OrderError(self.sampled_warnings, header=header)), OrderWarning, stacklevel=2)
        where = "OrderValidator (step 1, before its optimizer step)"
        self._act(trainer, agree([g["found"] for g in gathered]), where)

    def _overflow(self, trainer: pl.Trainer, step: StepOne) -> None:
        """An id beyond the token embedding, reported before the embedding fails on it (no all-gather:
        this runs inside the model's forward)."""
        self._unwatch()
        verdict = judge_step_one(step, TokenFacts())
        self._act(
            trainer, verdict.violations, "OrderValidator (step 1, entering the token embedding)", fatal=True
        )

    def _unwatch(self) -> None:
        observer, self._step_one.observer = self._step_one.observer, None
        if observer is not None:
            observer.remove()
            self._step_one.judged = True

    def _act(self, trainer: pl.Trainer, violations: list[Violation], where: str, fatal: bool = False) -> None:
        """Raises (``fatal`` always: what follows cannot run) or warns, with the report."""
        self.violations = merge_violations(self.violations, violations)
        if not violations:
            return
        header = format_report(
            violations,
            devices=max(1, int(trainer.world_size)),
            planned_hours=self.planned_hours,
            gpu_hour_price=self.gpu_hour_price,
            where=where,
        )
        error = OrderError(violations, header=header)
        if self.on_violation == "raise" or fatal:
            self._unguard()
            raise error
        if trainer.is_global_zero:
            warnings.warn(str(error), OrderWarning, stacklevel=2)

    def _check_checkpoint(self, trainer: pl.Trainer, checkpoint: Mapping[str, Any]) -> None:
        """The ``resume`` checks on a checkpoint's content, before any of its weights is restored."""
        state, owner = self._state, OrderValidator.__qualname__
        stored = {
            "fingerprints": stored_fingerprints(checkpoint, self.state_key, owner=owner),
            "content": stored_content(checkpoint, self.state_key),
            "position": stored_position(checkpoint, self.state_key, owner=owner),
            "loop_count": stored_loop_count(checkpoint),
        }
        state.done.add(Done.RESUME_CHECKED)
        state.seen.add(CheckpointSeen.FILE)
        state.stored_position = stored["position"]
        state.loader_states = stored_loader_states(checkpoint)
        where = "OrderValidator (resume, before the weights are restored)"
        self._run(trainer, Phase.RESUME, trainer.lightning_module, where, checkpoint=stored)

    def _guard_weight_restore(self, trainer: pl.Trainer) -> None:
        strategy = trainer.strategy
        tie_sharded_saves(strategy)

        def judge(checkpoint: Mapping[str, Any]) -> None:
            if Done.RESUME_CHECKED not in self._state.done:
                self._check_checkpoint(trainer, checkpoint)

        shapes = partial(self._check_shapes, trainer)
        if self._state.guarded is None and guard_restore(strategy, judge, shapes, self._unguard):
            self._state.guarded = strategy

    def _check_shapes(self, trainer: pl.Trainer, checkpoint: Mapping[str, Any]) -> None:
        """Weights that cannot load are named by the order error behind them, before torch fails."""
        module, state = trainer.lightning_module, self._state
        violations = (
            restore_violations(module, checkpoint, state.dims, state.observed) if module is not None else []
        )
        self._act(trainer, violations, "OrderValidator (resume, the weights cannot be restored)", fatal=True)

    def _unguard(self) -> None:
        if self._state.guarded is not None:
            release_restore(self._state.guarded)
            self._state.guarded = None

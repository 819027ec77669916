"""A run's phases: what the validator knows between them, the evidence each gathers, one agreed verdict.

The core any loop's adapter shares (``OrderValidator`` is Lightning's): a phase (``setup``,
``resume``, ``fit-start``, ``train-start``, ``step-one``) gathers its evidence once
(:func:`phase_evidence`: the datamodule's word, this run's state, the model's dims) and runs what
the check registry (:mod:`lightning_order.checks.registry`) holds for it (:func:`run_phase`), the
verdict agreed across ranks in one all-gather. What one run knows between its phases is one
state object (:class:`ValidatorState`). The checks judged on this evidence alone (the ledger
against its pipeline, the model's dims, the ranks' data) are registered here.

**What one run knows between its hooks**: one state object, reset by ``setup``.

Lightning calls the hooks in an order it fixes (``setup``, the weight restore, the callback
state's restore, ``on_fit_start``, ``on_train_start``, ...); each leaves here what a later one
needs. Two sets say where the run stands: how a checkpoint of this run has shown itself
(:class:`CheckpointSeen`) and which once-per-run steps are done (:class:`Done`); a hook asks them
a question (:attr:`ValidatorState.resuming`, :attr:`ValidatorState.resume_unchecked`) instead of
combining flags. Nothing here goes into a checkpoint: the callback's ``state_dict`` saves the
data's identity, content sample and position, kept as the callback's public attributes;
:func:`saved_state` reads them back.

**A phase's evidence.** What the validator reads off a run for every check: the datamodule's word and the
model's dims, gathering only, over duck-typed objects (``OrderedDataModule``,
``OrderedLMDataModule``, a hand-written datamodule that records its steps, or any other); the
judgements are pure functions in :mod:`lightning_order.checks`. Two sources, each read the same
way by every check that needs it (the items behind the dataloaders are read through
:mod:`.reading`):

- what a datamodule says about its own data: its ledger, data fingerprints, dims and the spec
  that judges it (the ledger and its pipeline are read by :mod:`lightning_order.recorder`, which
  the monitor shares);
- the dims a model was built for: its ``hparams`` (the dims of every pipeline,
  :func:`lightning_order.pipelines.all_dims`, so a pipeline's new dim is checked without a change
  here) and its input layers.

The checks judged on these alone are registered here: the ledger against its pipeline
(``setup``) and the model's dims against the data's (``fit-start``).

**Running a phase, agreed across ranks**: what every rank holds, gathered; a phase's registered checks
run; one verdict all ranks agree on.

Cross-rank decisions are taken on gathered data, so every rank acts alike and none is left
waiting in a collective the others skipped (STYLE.md, rank discipline). Under one process
:func:`all_gather` and :func:`agree` are the identity.

:func:`run_phase` runs what :mod:`lightning_order.checks.registry` holds for a phase: each
check's ``gather`` on this rank, in the registry's order (identical on every rank, so a gather
that is itself a collective meets the others'), then its judge on the evidence it declared; one
all-gather carries every rank's violations and the gathered results of the checks that read the
ranks, whose judges then run on the same data on every rank. So a phase costs one collective
besides its checks' own, whatever is registered.

:func:`rank_summary` is what one rank contributes to the rank check
(:func:`lightning_order.checks.ranks.check_ranks`), registered here as ``rank-data``.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

import torch
from torch import nn

from lightning_order.callbacks.validator.reading import as_numpy, batch_field
from lightning_order.checks.datasets import check_rank_datasets, same_rows_compared
from lightning_order.checks.ledger import judged_pipeline
from lightning_order.checks.model import check_model_dims
from lightning_order.checks.ranks import check_ranks
from lightning_order.checks.registry import (
    CheckEvidence,
    EvidenceKind,
    Phase,
    register_check,
    registered_checks,
)
from lightning_order.checks.report import merge_violations
from lightning_order.checks.resume import check_restore_shapes
from lightning_order.errors import CheckpointError
from lightning_order.ledger import StepLedger
from lightning_order.order import STANDARD_PIPELINE, Pipeline
from lightning_order.parallelism import data_parallel
from lightning_order.pipelines import all_dims, spec_for, spec_of_class
from lightning_order.recorder import datamodule_ledger, ledger_pipeline, recorded_fingerprints
from lightning_order.rules import Violation
from lightning_order.spec import PipelineSpec

__all__ = [
    "CheckpointSeen",
    "Done",
    "PhaseResult",
    "SavedState",
    "ValidatorState",
    "agree",
    "all_gather",
    "data_dims",
    "data_fingerprints",
    "ledger_violations",
    "model_dims",
    "phase_evidence",
    "rank_identity",
    "rank_summary",
    "restore_violations",
    "run_phase",
    "saved_state",
    "spec_of",
]

log = logging.getLogger(__name__)


# == What one run knows between its hooks ==========================================================
class CheckpointSeen(Enum):
    """How a checkpoint of this run has shown itself to the validator (both may happen)."""

    #: Its file was read before the weights were restored (``trainer.ckpt_path`` set by the user,
    #: or the wrapped ``load_model_state_dict``): the resume check ran on its stored fingerprints.
    FILE = "file"
    #: Lightning loaded the validator's saved state (``load_state_dict``): the callback's
    #: ``fingerprints``, ``dims`` and ``position`` are the checkpoint's, not this run's.
    STATE = "state"


class Done(Enum):
    """The once-per-run steps of the validator that have happened."""

    #: The checkpoint's data fingerprints were compared with this run's.
    RESUME_CHECKED = "resume-checked"
    #: The model's dims (and an LM run's rows and tokenizer) were checked against the data's.
    MODEL_CHECKED = "model-checked"
    #: ``evaluate`` was recorded in the ledger (the first real validation after training).
    EVALUATE_RECORDED = "evaluate-recorded"


@dataclass
class ValidatorState:
    """What the validator learnt in this run's hooks, for its later hooks.

    Attributes:
        fingerprints: this run's data fingerprints as ``setup`` found them (every check compares
            against these, whatever a checkpoint's state later put into the callback's own).
        dims: this run's data dims as ``setup`` found them.
        observed: what sampled batches showed about the dims of a datamodule without ``dims``.
        evidence: what the latest checks had to go on (overlap, label encoding, same-row floats).
        tokenizer: the fingerprint of the tokenizer in use at ``setup``, or ``None``.
        content: this run's content sample for a datamodule without a ledger (the tokenizer and
            item hashes per split, :mod:`lightning_order.checks.resume_content`), else empty.
        seen: how a checkpoint of this run has shown itself.
        done: the once-per-run steps that have happened.
        stored_position: the data position in the checkpoint's file, as the resume check read it.
        loader_states: the checkpoint's train loader states (Lightning's), judged in ``on_fit_start``
            before Lightning restores them.
        trainer: a weak reference to the Trainer while fitting (``state_dict`` saves its live
            position); ``None`` before ``setup``.
        guarded: the strategy whose ``load_model_state_dict`` the validator wraps, or ``None``;
            it outlives a ``setup`` (``teardown`` or an exception removes the wrapper).
    """

    fingerprints: dict[str, str] = field(default_factory=dict)
    dims: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    content: dict[str, Any] = field(default_factory=dict)
    seen: set[CheckpointSeen] = field(default_factory=set)
    done: set[Done] = field(default_factory=set)
    stored_position: dict[str, Any] | None = None
    loader_states: list[Any] = field(default_factory=list)
    trainer: weakref.ReferenceType[Any] | None = None
    guarded: Any = None

    @property
    def resuming(self) -> bool:
        """Whether this run resumes from a checkpoint (its file read, or its state restored)."""
        return bool(self.seen)

    @property
    def resume_unchecked(self) -> bool:
        """Whether a restored state still waits for the resume check (no file was read first)."""
        return CheckpointSeen.STATE in self.seen and Done.RESUME_CHECKED not in self.done


class SavedState(NamedTuple):
    """What ``OrderValidator.state_dict`` saves (the callback's public attributes of the same names)."""

    fingerprints: dict[str, str]
    dims: dict[str, Any]
    position: dict[str, Any] | None
    content: dict[str, Any]


def saved_state(state_dict: Any) -> SavedState:
    """What ``OrderValidator.state_dict`` saved, read back.

    Older or foreign states may lack keys (or hold a ``"version"``): they are defaulted, never a
    failed resume.

    Raises:
        CheckpointError: the state is no state of ``OrderValidator``'s (damaged, or written by
            something else).
    """
    if not isinstance(state_dict, Mapping) or not isinstance(state_dict.get("fingerprints") or {}, Mapping):
        raise CheckpointError(
            f"the checkpoint's OrderValidator state is not what OrderValidator saves (got "
            f"{type(state_dict).__name__}): the checkpoint is damaged or was written by something else; "
            "resume from an intact checkpoint"
        )
    return SavedState(
        fingerprints={str(k): str(v) for k, v in (state_dict.get("fingerprints") or {}).items()},
        dims=dict(state_dict.get("dims") or {}),
        position=dict(state_dict["position"]) if state_dict.get("position") else None,
        content=dict(state_dict.get("content") or {}),
    )


# == A phase's evidence ============================================================================
# -- what a datamodule says ------------------------------------------------------------------
def data_fingerprints(dm: Any) -> dict[str, str]:
    """``dm.data_fingerprints()`` (any datamodule may define it), else those a recorded ledger holds."""
    method = getattr(dm, "data_fingerprints", None)
    if not callable(method):
        ledger = datamodule_ledger(dm)
        return recorded_fingerprints(ledger) if ledger is not None else {}
    return {str(k): str(v) for k, v in (method() or {}).items() if v is not None}


def data_dims(dm: Any) -> dict[str, Any]:
    """``dm.dims`` without its ``None`` values (``{}`` when the datamodule has none)."""
    dims = getattr(dm, "dims", None) if dm is not None else None
    return {k: v for k, v in dims.items() if v is not None} if isinstance(dims, Mapping) else {}


def spec_of(dm: Any, ledger: StepLedger | None = None) -> PipelineSpec | None:
    """The registered spec ``dm`` belongs to: its class's, else the one its ledger names; ``None``: none.

    A datamodule of no registered class with no ledger (zero glue) belongs to none.
    """
    spec = spec_of_class(type(dm)) if dm is not None else None
    if spec is not None or ledger is None:
        return spec
    try:
        return spec_for(ledger=ledger)
    except KeyError as err:  # a ledger of a pipeline this version does not know
        log.debug("OrderValidator: %s", err)
        return None


def ledger_violations(
    dm: Any, ledger: StepLedger, configured: Pipeline = STANDARD_PIPELINE
) -> list[Violation]:
    """Every violation of ``dm``'s ledger, judged by its spec: the order and the spec's ledger checks.

    Args:
        dm: the datamodule.
        ledger: its ledger.
        configured: the pipeline the caller was given (``OrderValidator(pipeline=...)``).
    """
    pipeline = judged_pipeline(ledger_pipeline(dm, ledger, configured), ledger)
    spec = spec_of(dm, ledger) or spec_for()
    return spec.check(ledger, pipeline)


# -- the dims a model was built for -----------------------------------------------------------
def model_dims(module: nn.Module) -> dict[str, Any]:
    """The data dims a module was built for: integer ``hparams`` of the pipelines' dims, the rows
    of its token embedding (``embedding_rows``) and the input width of its features layer
    (``feature_in``), whichever exist."""
    dims: dict[str, Any] = {}
    hparams = getattr(module, "hparams", None) or {}
    for key in all_dims():
        value = hparams.get(key) if isinstance(hparams, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            dims[key] = value
    for name, layer in module.named_modules():
        # The token table: the first embedding that is not a position table.
        if isinstance(layer, nn.Embedding) and "pos" not in name.lower() and "embedding_rows" not in dims:
            dims["embedding_rows"] = int(layer.num_embeddings)
        if isinstance(layer, nn.Linear) and "feature" in name.lower() and "feature_in" not in dims:
            if not isinstance(layer, nn.LazyLinear) or layer.in_features:
                dims["feature_in"] = int(layer.in_features)
    return dims


def restore_violations(
    module: nn.Module, checkpoint: Mapping[str, Any], dims: Mapping[str, Any], observed: Mapping[str, Any]
) -> list[Violation]:
    """Weights of ``checkpoint`` that cannot load into ``module``, named by the order error behind
    them (:func:`~lightning_order.checks.resume.check_restore_shapes`); ``dims``: the data's dims,
    ``observed``: what sampled batches showed."""
    stored = {
        k: tuple(v.shape) for k, v in (checkpoint.get("state_dict") or {}).items() if torch.is_tensor(v)
    }
    if not stored:
        return []
    model = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    fits = not check_model_dims(model_dims(module), dict(dims), observed=dict(observed))
    return check_restore_shapes(stored, model, model_fits_data=fits)


# -- a phase's evidence --------------------------------------------------------------------------
def phase_evidence(
    phase: Phase,
    dm: Any,
    module: Any,
    world_size: int,
    state: ValidatorState,
    pipeline: Pipeline,
    settings: Mapping[str, Any],
    *,
    samples: Mapping[str, Any] | None = None,
    checkpoint: Mapping[str, Any] | None = None,
    step_one: Any = None,
) -> CheckEvidence:
    """What ``phase``'s checks read: this run's data as ``setup`` found it (``state``), and what is given.

    Args:
        phase: the phase.
        dm: the datamodule, or ``None``.
        module: the model, whose dims are read when a check of the phase reads them.
        world_size: the number of processes of the run.
        state: what the validator knows of this run.
        pipeline: the pipeline the ledger is judged against.
        settings: the validator's settings.
        samples: sampled rows read for this phase (``setup``'s), added to what ``state`` holds.
        checkpoint: what a checkpoint being resumed holds, or ``None``.
        step_one: what the first training step showed, or ``None``.
    """
    # The model's dims only where a check of the phase reads them (a walk over its modules).
    reads_model = any(EvidenceKind.MODEL in check.reads for check in registered_checks(phase))
    return CheckEvidence(
        phase=phase,
        world_size=max(1, int(world_size)),
        settings=dict(settings),
        datamodule=dm,
        ledger=datamodule_ledger(dm),
        pipeline=pipeline,
        fingerprints=dict(state.fingerprints),
        dims=dict(state.dims),
        samples={
            **(samples or {}),
            "observed": dict(state.observed),
            "tokenizer": state.tokenizer,
            "resume_sample": dict(state.content),
        },
        model=model_dims(module) if module is not None and reads_model else {},
        checkpoint=checkpoint,
        step_one=step_one,
    )


# -- the checks judged on these alone ------------------------------------------------------------
def _judge_order(evidence: CheckEvidence) -> list[Violation]:
    if evidence.ledger is None:
        return []
    # A hand-written datamodule (lightning_order.recording) is judged on the steps it declares.
    return ledger_violations(evidence.datamodule, evidence.ledger, evidence.pipeline or STANDARD_PIPELINE)


def _judge_model_dims(evidence: CheckEvidence) -> list[Violation]:
    return check_model_dims(
        dict(evidence.model), dict(evidence.dims), observed=evidence.samples.get("observed")
    )


register_check(
    "order",
    _judge_order,
    phase=Phase.SETUP,
    reads=[EvidenceKind.LEDGER],
    rules=(
        "missing-step",
        "out-of-order",
        "stale-input",
        "vocab-before-clean",
        "fit-before-split",
        "shard-before-normalize",
        "init-before-data",
        "cycle",
        "duplicate-step",
        "dedup-after-split",
        "pack-without-eos",
    ),
    order=10,
)
register_check(
    "model-dims",
    _judge_model_dims,
    phase=Phase.FIT_START,
    reads=[EvidenceKind.MODEL, EvidenceKind.LEDGER, EvidenceKind.SAMPLES],
    rules=("init-before-data",),
    order=10,
)


# == Running a phase, agreed across ranks ==========================================================
def all_gather(trainer: Any, obj: Any) -> list[Any]:
    """``obj`` from every rank, in rank order (a one-element list in a single process).

    Collective under DDP: every rank must call it at the same point.
    """
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, obj)
        return gathered
    return [obj]


def agree(per_rank: list[list[dict[str, Any]]]) -> list[Violation]:
    """One list from every rank's violations (as dicts), identical on every rank.

    Rank 0's violations come first, all of them; another rank adds what rank 0 did not report
    under the same rule and steps (ranks word the same finding with their own fingerprints).
    """
    found: list[Violation] = []
    for rank, dicts in enumerate(per_rank):
        known = {(v.rule, v.steps) for v in found}
        for d in dicts:
            violation = Violation.from_dict(d)
            if rank == 0 or (violation.rule, violation.steps) not in known:
                found.append(violation)
    return merge_violations(found)


def rank_identity(trainer: Any) -> dict[str, Any]:
    """``rank`` (global) and ``data_parallel`` (:class:`~lightning_order.parallelism.DataParallel` as a dict).

    The rank checks group ranks by their data-parallel rank: one tensor-parallel group each.
    """
    return {"rank": int(trainer.global_rank), "data_parallel": data_parallel(trainer).to_dict()}


def rank_summary(
    trainer: Any, dm: Any, ledger: StepLedger | None, fingerprints: Mapping[str, str], train_batch: Any
) -> dict[str, Any]:
    """This rank's summary for :func:`~lightning_order.checks.ranks.check_ranks` (its keys are listed there).

    Args:
        trainer: the Trainer (its rank and world size).
        dm: the datamodule (its ``shard_info``, if any).
        ledger: the datamodule's ledger (the statistics ``fit_features`` recorded).
        fingerprints: the data fingerprints this rank holds.
        train_batch: a sampled train batch whose ``features`` statistics are compared across ranks
            when there are no fingerprints to compare (``None``: not compared).
    """
    shard_info = getattr(dm, "shard_info", None) if dm is not None else None
    summary: dict[str, Any] = {
        **rank_identity(trainer),
        "fingerprints": dict(fingerprints),
        "shard_length": shard_info.get("length") if isinstance(shard_info, Mapping) else None,
        "shard_start": shard_info.get("start") if isinstance(shard_info, Mapping) else None,
    }
    fitted = ledger.latest("fit_features") if ledger is not None else None
    if fitted is not None:
        summary["feature_names"] = fitted.stats.get("columns")
        summary["fitted_mean"] = fitted.stats.get("mean")
    if trainer.world_size > 1 and train_batch is not None:
        # No fingerprints to compare: sampled feature statistics are the evidence left.
        features = as_numpy(batch_field(train_batch, "features"))
        if features is not None and features.ndim == 2 and len(features):
            summary["feature_mean"] = features.mean(axis=0).tolist()
            summary["feature_std"] = features.std(axis=0).tolist()
            summary["feature_rows"] = int(features.shape[0])
    return summary


@dataclass
class PhaseResult:
    """What :func:`run_phase` found, identical on every rank.

    Attributes:
        violations: every registered check's, agreed across ranks (rank 0's first).
        fatal: whether a check marked ``fatal`` found something (the run stops even in warn mode).
        facts: what the checks had to go on (each check's ``facts``), for other callbacks.
        checks: the names of the checks that ran, in order.
    """

    violations: list[Violation] = field(default_factory=list)
    fatal: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)


def run_phase(trainer: Any, phase: Phase, evidence: CheckEvidence) -> PhaseResult:
    """Runs every check registered for ``phase`` on ``evidence``; the verdict agreed across ranks.

    Collective under DDP: every rank must call it at the same point (one all-gather, plus the
    collectives of the checks' own ``gather``, in the same order on every rank).

    Args:
        trainer: the Trainer (the all-gather; handed to each check's ``gather``).
        phase: the phase being judged.
        evidence: what the caller gathered for the phase (each check sees the kinds it declares).
    """
    checks = registered_checks(phase)
    gathered = {c.name: c.gather(trainer, evidence.only(c.reads)) if c.gather else None for c in checks}

    def view(check: Any, ranks: list[Any] | tuple[()] = ()) -> CheckEvidence:
        return dataclasses.replace(evidence.only(check.reads), gathered=gathered[check.name], ranks=ranks)

    local: list[Violation] = []
    fatal = False
    for check in checks:
        if EvidenceKind.RANKS not in check.reads:
            found = list(check.judge(view(check)))
            local += found
            fatal |= check.fatal and bool(found)
    shared = {c.name: gathered[c.name] for c in checks if EvidenceKind.RANKS in c.reads}
    per_rank = all_gather(
        trainer, {"ranks": shared, "violations": [v.to_dict() for v in local], "fatal": fatal}
    )
    violations = agree([g["violations"] for g in per_rank])
    fatal = any(g["fatal"] for g in per_rank)
    ranks = {name: [g["ranks"][name] for g in per_rank] for name in shared}
    for check in checks:
        if EvidenceKind.RANKS in check.reads:  # the same gathered data on every rank: the same verdict
            found = list(check.judge(view(check, ranks[check.name])))
            violations = merge_violations(violations, found)
            fatal |= check.fatal and bool(found)
    facts: dict[str, Any] = {}
    for check in checks:
        if check.facts is not None:
            facts.update(check.facts(gathered[check.name], ranks.get(check.name, ())))
    return PhaseResult(violations, fatal, facts, [c.name for c in checks])


# -- the rank check ------------------------------------------------------------------------------
def _gather_rank_data(trainer: Any, evidence: CheckEvidence) -> dict[str, Any]:
    samples = evidence.samples
    content = samples.get("content") or {}
    # The content summary compares every float key; the sampled `features` only where it is missing.
    train = None if content.get("train") else samples.get("train")
    summary = rank_summary(trainer, evidence.datamodule, evidence.ledger, evidence.fingerprints, train)
    summary["content"] = {**rank_identity(trainer), **content, "model": dict(evidence.model)}
    return summary


def _judge_rank_data(evidence: CheckEvidence) -> list[Violation]:
    summaries = list(evidence.ranks)
    return merge_violations(check_ranks(summaries), check_rank_datasets([s["content"] for s in summaries]))


register_check(
    "rank-data",
    _judge_rank_data,
    phase=Phase.SETUP,
    reads=[EvidenceKind.RANKS, EvidenceKind.LEDGER, EvidenceKind.SAMPLES, EvidenceKind.MODEL],
    rules=("rank-mismatch", "shard-before-normalize"),
    gather=_gather_rank_data,
    order=40,
    facts=lambda _own, ranks: {"same_rows_floats": same_rows_compared([s["content"] for s in ranks])},
)

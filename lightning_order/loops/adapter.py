"""The validator's checks for a loop without a Lightning Trainer: one seam onto the callback's core.

``OrderValidator`` reads a run off a Lightning Trainer. A plain PyTorch loop, a Fabric loop or the
Hugging Face Trainer has a model and loaders instead; this module stands in for the rest:

- :class:`LoaderData`: a "datamodule" over plain loaders (``train_dataloader()``,
  ``val_dataloader()``, ``tokenizer``), which is all the validator's gathers read of one;
- :class:`RunView`: what the gathers and :func:`~lightning_order.callbacks.validator.phases.run_phase`
  read off a Trainer (the datamodule, the module, the train loader, the world size and rank from
  ``torch.distributed``);
- :func:`checks_before_step_one`: the phases the callback runs before step 1 (``setup``,
  ``fit-start``, ``train-start``) with the evidence its ``setup`` gathers, run in the same order,
  so the same checks give the same rule codes and messages;
- :func:`judge_first_step`: step 1 as the callback judges it (the observer's record, the sampled
  guesses it did not decide), agreed across ranks.

Trade-off: no checkpoint is read (a plain loop's resume is its own), so the ``resume`` checks and
the loader-state checks do not run, and nothing is recorded into a ledger. Every name this module
takes from :mod:`lightning_order.callbacks.validator` is imported at the top, in one place, so a
reorganisation of the validator re-points them here and nowhere else.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from lightning_order.callbacks.validator.content import sampled_evidence
from lightning_order.callbacks.validator.lm import is_hf_model, tokenizer_in_use
from lightning_order.callbacks.validator.phases import (
    ValidatorState,
    agree,
    all_gather,
    data_dims,
    data_fingerprints,
    phase_evidence,
    run_phase,
)
from lightning_order.callbacks.validator.step_one import StepOneObserver
from lightning_order.checks.lm import fit_fixes_to_model
from lightning_order.checks.registry import Phase
from lightning_order.checks.report import format_report, merge_violations
from lightning_order.checks.step_one import StepOne, TokenFacts, judge_step_one
from lightning_order.errors import OrderError, OrderWarning
from lightning_order.order import STANDARD_PIPELINE
from lightning_order.rules import Violation

__all__ = [
    "LoaderData",
    "PreStep",
    "RunView",
    "checks_before_step_one",
    "judge_first_step",
    "report_error",
    "run_view",
    "step_one_observer",
    "unwrap_loader",
]


def unwrap_loader(loader: Any) -> Any:
    """The ``torch`` ``DataLoader`` behind ``loader``: Fabric's ``setup_dataloaders`` wrapper keeps the
    one it wraps (with the distributed sampler it injected) as ``_dataloader``; anything else as it is.

    Read duck-typed, so ``lightning.fabric`` is never imported here.
    """
    inner = getattr(loader, "_dataloader", None)
    return inner if isinstance(inner, torch.utils.data.DataLoader) else loader


class LoaderData:
    """A datamodule over plain loaders: what the validator's gathers read of one.

    Args:
        train_loader: the loader the loop trains on.
        val_loader: the validation loader, or ``None``.
        tokenizer: the tokenizer the data was encoded with (a ``tokenizers.Tokenizer`` or a
            ``transformers`` tokenizer), or ``None``: the LM rules that need its ids (the
            end-of-text label, documents without EOS, the model's rows against its size) then
            read what the batches alone show.
    """

    def __init__(self, train_loader: Any, val_loader: Any = None, tokenizer: Any = None) -> None:
        self._train, self._val = unwrap_loader(train_loader), unwrap_loader(val_loader)
        self.tokenizer = tokenizer

    def train_dataloader(self) -> Any:
        """The train loader."""
        return self._train

    def val_dataloader(self) -> Any:
        """The validation loader (an empty list without one, as Lightning's "no loader")."""
        return self._val if self._val is not None else []


@dataclass
class RunView:
    """What the validator's gathers read off a Lightning Trainer, for a loop that has none.

    Attributes:
        datamodule: the data (a real datamodule, or :class:`LoaderData`).
        lightning_module: the model (any ``nn.Module``; wrappers such as DDP's are walked through).
        train_dataloader: the ``DataLoader`` the loop iterates (its sampler is read, never drawn from).
        val_dataloaders: the validation loader, or ``None``.
        world_size: the processes of the run (``torch.distributed``'s world, else 1).
        global_rank: this process's rank.
    """

    datamodule: Any
    lightning_module: nn.Module
    train_dataloader: Any
    val_dataloaders: Any = None
    world_size: int = 1
    global_rank: int = 0
    #: No Lightning strategy: the data-parallel group is the whole world.
    strategy: Any = None
    ckpt_path: str | None = None
    global_step: int = 0
    current_epoch: int = 0
    sanity_checking: bool = False

    @property
    def is_global_zero(self) -> bool:
        """Whether this is rank 0."""
        return self.global_rank == 0


def run_view(model: nn.Module, train_loader: Any, val_loader: Any = None, datamodule: Any = None,
             tokenizer: Any = None) -> RunView:  # fmt: skip
    """A :class:`RunView` of a loop: its world size and rank from ``torch.distributed`` when initialised.

    Args:
        model: the model trained.
        train_loader: the train loader (a Fabric-wrapped one is unwrapped).
        val_loader: the validation loader, or ``None``.
        datamodule: a datamodule the loaders come from (its ledger, dims and fingerprints are then
            read as the callback reads them), or ``None``: the loaders are wrapped in :class:`LoaderData`.
        tokenizer: the tokenizer, for :class:`LoaderData` (a datamodule gives its own).
    """
    data = datamodule if datamodule is not None else LoaderData(train_loader, val_loader, tokenizer)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    world = torch.distributed.get_world_size() if distributed else 1
    rank = torch.distributed.get_rank() if distributed else 0
    return RunView(data, model, unwrap_loader(train_loader), unwrap_loader(val_loader), world, rank)


@dataclass
class PreStep:
    """What the checks before step 1 found, identical on every rank.

    Attributes:
        violations: every phase's, merged (each phase's own list already agreed across ranks).
        fatal: whether a check marked fatal found something.
        facts: the tokenizer's facts for the step-1 rules.
        guesses: what sampled batches suggested, for step 1 to decide or to warn.
        evidence: what the checks had to go on (each check's ``facts``).
    """

    violations: list[Violation] = field(default_factory=list)
    fatal: bool = False
    facts: TokenFacts = field(default_factory=TokenFacts)
    guesses: list[Violation] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


def checks_before_step_one(view: RunView, settings: Mapping[str, Any]) -> PreStep:
    """The ``setup``, ``fit-start`` and ``train-start`` checks of ``view``, as the callback runs them.

    Collective under ``torch.distributed``: every rank must call it at the same point. Every phase
    runs, whatever an earlier one found, so all ranks meet in the same collectives.

    Args:
        view: the run.
        settings: the validator's settings (``sample_rows``, ``overlap_max_rows``,
            ``overlap_threshold``, ``whole_rows``, ``label_check_rows``).
    """
    dm, module = view.datamodule, view.lightning_module
    state = ValidatorState(fingerprints=data_fingerprints(dm), dims=data_dims(dm))
    # The callback's setup: without fingerprints and dims, what the datasets hold (same indices per rank).
    plain = not (state.fingerprints and state.dims)
    train_sample, state.observed, content = sampled_evidence(
        view, dm, plain=plain, dims=state.dims,
        sample_rows=int(settings["sample_rows"]), whole_rows=int(settings["whole_rows"]),
    )  # fmt: skip
    content["tokenizer"] = state.tokenizer = tokenizer_in_use(dm)
    samples = {"train": train_sample[0], "train_size": train_sample[1], "content": content}
    found = PreStep()
    for phase, given in ((Phase.SETUP, {"samples": samples}), (Phase.FIT_START, {}), (Phase.TRAIN_START, {})):
        evidence = phase_evidence(phase, dm, module, view.world_size, state, STANDARD_PIPELINE, settings, **given)
        result = run_phase(view, phase, evidence)
        violations = result.violations
        if phase is Phase.FIT_START:  # resize_token_embeddings for transformers models
            violations = fit_fixes_to_model(violations, is_hf_model(module))
        found.violations = merge_violations(found.violations, violations)
        found.fatal |= result.fatal
        found.evidence.update(result.facts)
    found.guesses = list(found.evidence.get("lm_sampled_guesses", ()))
    found.facts = found.evidence.get("lm_token_facts") or TokenFacts()
    return found


def step_one_observer(
    model: nn.Module, on_overflow: Callable[[StepOne], None] | None = None
) -> StepOneObserver:
    """The callback's step-1 observer on ``model`` (not installed yet)."""
    return StepOneObserver(model, on_overflow=on_overflow)


def overflow_violations(step: StepOne) -> list[Violation]:
    """What an id beyond the token embedding proves, judged before the embedding fails on it."""
    return judge_step_one(step, TokenFacts()).violations


def judge_first_step(
    view: RunView, observer: StepOneObserver | None, facts: TokenFacts, guesses: list[Violation]
) -> tuple[list[Violation], list[Violation]]:
    """``(violations, unproven)`` of step 1, identical on every rank; removes the observer.

    Collective under ``torch.distributed`` (one all-gather). ``unproven``: the sampled guesses
    whose rule step 1 did not decide (warned, never raised).
    """
    found: list[Violation] = []
    decided: frozenset[str] = frozenset()
    if observer is not None:
        observer.remove()
        verdict = judge_step_one(observer.observation(), facts)
        found, decided = verdict.violations, verdict.decided
    local = {
        "found": [v.to_dict() for v in found],
        "guesses": [v.to_dict() for v in guesses if v.rule not in decided],
    }
    gathered = all_gather(view, local)
    return agree([g["found"] for g in gathered]), agree([g["guesses"] for g in gathered])


def report_error(
    violations: list[Violation], view: RunView, where: str, *, planned_hours: float | None = None,
    gpu_hour_price: float | None = None, header: str | None = None,
) -> OrderError:  # fmt: skip
    """The :class:`~lightning_order.errors.OrderError` the callback raises for ``violations`` (its report)."""
    if header is None:
        header = format_report(
            violations, devices=max(1, int(view.world_size)), planned_hours=planned_hours,
            gpu_hour_price=gpu_hour_price, where=where,
        )  # fmt: skip
    return OrderError(violations, header=header)


def warn_unproven(view: RunView, unproven: list[Violation], owner: str) -> None:
    """Warns (rank 0) what sampled batches suggested and step 1 did not show, as the callback does."""
    if unproven and view.is_global_zero:
        header = f"{owner}: not proven (read from sampled batches only, step 1 did not show it):"
        warnings.warn(str(OrderError(unproven, header=header)), OrderWarning, stacklevel=3)

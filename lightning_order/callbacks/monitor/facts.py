"""What the SymptomMonitor knows about a run besides its training signals, and how it is set up.

:func:`gather_facts` reads, once, what the datamodule and an ``OrderValidator`` in the same
Trainer already know (its violations, what it observed, the ledger's steps, whether the data
keeps a vocabulary and of which kind) into a :class:`~lightning_order.checks.symptoms.RunFacts`:
plain data for the pure attribution. The validator is read through
:class:`~lightning_order.checks.registry.CheckReport` and its checks through the registry (the
label-encoding check, run here by name when no validator ran it), never through its modules.
The rest is the monitor's plumbing, kept out of the
callback: the placeholders for what other ranks saw, the unknown token's id and the
``symptom/*`` metrics it logs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lightning_order.callbacks.monitor.readings import RankLosses, TrainReadings
from lightning_order.callbacks.monitor.step_clock import StepClock
from lightning_order.checks.ledger import check_ledger, judged_pipeline
from lightning_order.checks.registry import CheckEvidence, CheckReport, Phase, check_named
from lightning_order.checks.symptoms import Diagnosis, LedgerProof, RunFacts, ledger_proof
from lightning_order.order import STANDARD_PIPELINE
from lightning_order.recorder import datamodule_ledger, ledger_pipeline
from lightning_order.rules import Violation

__all__ = [
    "gather_facts",
    "log_metrics",
    "monitor_metrics",
    "seen_elsewhere",
    "unk_id",
]

_SUBWORD_MODELS = ("WordPiece", "BPE", "Unigram")


def gather_facts(trainer: Any, label_check_rows: int = 0) -> RunFacts:
    """The run's facts from the Trainer's datamodule and any ``OrderValidator`` among its callbacks.

    Args:
        trainer: the Trainer.
        label_check_rows: without a validator (whose setup already ran it), read up to this many
            rows per split for the label-encoding check; ``0``: not here. Collective under DDP
            when it reads: every rank must call this at the same point.
    """
    dm = getattr(trainer, "datamodule", None)
    validators = [cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, CheckReport)]
    found = [v for validator in validators for v in validator.violations]
    evidence = [validator.evidence for validator in validators]
    label_checked = any(e.get("label_encoding") for e in evidence)
    overlap = next((e["overlap"] for e in evidence if e.get("overlap")), None)
    same_rows_floats = any(e.get("same_rows_floats") for e in evidence)
    if not validators and label_check_rows > 0:
        label_checked, labels = _label_encoding(trainer, dm, label_check_rows)
        found += labels
    rules = {v.rule for v in found}
    encoded = [c for v in found if v.details.get("kind") == "label-encoding" for c in v.details["columns"]]
    ledger = datamodule_ledger(dm)
    steps, proof = None, LedgerProof()
    if ledger is not None:
        steps = set(ledger.steps())
        configured = validators[0].pipeline if validators else STANDARD_PIPELINE
        pipeline = judged_pipeline(ledger_pipeline(dm, ledger, configured), ledger)
        if not validators:  # nobody judged the ledger yet: judge it here (pure, cheap)
            rules |= {v.rule for v in check_ledger(ledger, pipeline)}
        proof = ledger_proof(ledger, pipeline)
    vocabulary, kind = _vocabulary(dm, ledger, validators)
    return RunFacts.of(
        world_size=int(getattr(trainer, "world_size", 1) or 1),
        validator=bool(validators),
        rules=rules,
        ledger_steps=steps,
        vocabulary=vocabulary,
        vocab_kind=kind,
        label_encoded=encoded,
        fitted_on_train=proof.fitted_on_train,
        split_by_key=proof.split_by_key,
        overlap_check=overlap,
        label_checked=label_checked,
        same_rows_floats=same_rows_floats,
    )


def _label_encoding(trainer: Any, dm: Any, rows: int) -> tuple[bool, list[Violation]]:
    """The registered ``label-encoding`` check, run here (collective under DDP), and whether it gave a verdict."""
    check = check_named("label-encoding")
    if check is None:  # no validator package imported in this process: no check to run
        return False, []
    evidence = CheckEvidence(
        phase=Phase.SETUP,
        world_size=int(getattr(trainer, "world_size", 1) or 1),
        settings={"label_check_rows": rows},
        datamodule=dm,
    )
    found, facts = check.run_alone(trainer, evidence)
    return bool(facts.get("label_encoding")), found


def _vocabulary(dm: Any, ledger: Any, validators: list[CheckReport]) -> tuple[bool | None, str | None]:
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
        dims, observed = validator.dims, validator.observed
        if "vocab_size" in dims or "max_token_id" in observed:
            return True, None
        if dims or observed:  # the validator saw the data's dims or a batch: no token ids in it
            return False, None
    return None, None


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


def unk_id(dm: Any, unk_token: str, given: int | None) -> int | None:
    """The unknown token's id: ``given``, else asked from the datamodule's ``tokenizer``."""
    if given is not None:
        return given
    token_to_id = getattr(getattr(dm, "tokenizer", None), "token_to_id", None)
    return token_to_id(unk_token) if callable(token_to_id) else None


def log_metrics(
    trainer: Any,
    diagnoses: int,
    clock: StepClock,
    readings: TrainReadings,
    ranks: RankLosses,
    memory: Sequence[float],
) -> None:
    """Sends the monitor's ``symptom/*`` metrics to the Trainer's loggers (global rank 0 only)."""
    if not trainer.loggers or not trainer.is_global_zero:
        return
    metrics = monitor_metrics(
        diagnoses, clock.waits, clock.steps, readings.unk_rate, ranks.rows, memory, trainer.world_size
    )
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)

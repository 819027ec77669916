"""Which detector judges which of the monitor's readings, and with which options.

The detectors (:mod:`lightning_order.checks.symptoms`) are pure functions of numbers; the
monitor keeps the numbers (:mod:`.readings`, :mod:`.step_clock`). The functions here hand each
detector its readings and its options (the monitor's defaults, then the user's ``thresholds``)
and return the candidate diagnoses, not yet attributed to a cause: the monitor attributes them,
shares them across ranks and acts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lightning_order.callbacks.monitor.readings import RankLosses, TrainReadings
from lightning_order.callbacks.monitor.step_clock import StepClock
from lightning_order.checks.symptoms import (
    SYMPTOMS,
    Diagnosis,
    detect_data_starvation,
    detect_early_oscillation,
    detect_input_shift,
    detect_label_leak,
    detect_memory_swing,
    detect_plateau,
    detect_rank_divergence,
    detect_train_val_gap,
    rank_input_shift,
)

__all__ = [
    "input_shift",
    "kwargs_for",
    "rank_divergence",
    "resolve_thresholds",
    "train_diagnoses",
    "validation_gap",
]

_DETECTOR_DEFAULTS: dict[str, dict[str, float]] = {
    "early-oscillation": {"warmup_steps": 5, "window": 40},
    "plateau": {"warmup_steps": 20, "window": 120},
    "data-starvation": {"min_steps": 20},
    "memory-swing": {"min_steps": 20},
}

Options = Mapping[str, Mapping[str, float]]


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


def train_diagnoses(
    readings: TrainReadings,
    clock: StepClock,
    memory: Sequence[float],
    *,
    batches: int,
    step: int,
    options: Options,
    wanted: Callable[[str], bool],
    subword: bool,
) -> list[Diagnosis | None]:
    """What one rank's train readings show at a check: early oscillation, plateau, starvation, memory.

    Args:
        readings: the train losses and unknown tokens (their windows already flushed).
        clock: the step clock (its marks already read).
        memory: allocated-memory readings (empty off CUDA).
        batches: train batches seen in this fit.
        step: the global step.
        options: the resolved thresholds (:func:`resolve_thresholds`).
        wanted: whether a symptom is still watched (asked only before running its detector).
        subword: the data keeps a subword vocabulary (its unknown-token baseline is 0).
    """
    found: list[Diagnosis | None] = []
    # Judged once, on the whole window (a diverging run's first 20 steps swing like an oscillating one).
    if wanted("early-oscillation") and (early := readings.take_early()) is not None:
        found.append(detect_early_oscillation(early, step=step, **options["early-oscillation"]))
    if wanted("plateau") and (values := readings.plateau_losses(batches)) is not None:
        baseline = 0.0 if subword else None
        found.append(
            detect_plateau(
                values, step=step, unk_rate=readings.unk_rate, unk_baseline=baseline, **options["plateau"]
            )
        )
    starvation = options["data-starvation"]
    if wanted("data-starvation") and clock.may_starve(starvation.get("min_wait_s", 0.02)):
        found.append(detect_data_starvation(*clock.known(), step=step, **starvation))
    if wanted("memory-swing") and memory:
        found.append(detect_memory_swing(list(memory), step=step, **options["memory-swing"]))
    return found


def rank_divergence(ranks: RankLosses, *, step: int, options: Options, patience: int) -> Diagnosis | None:
    """Ranks whose losses diverge, once ``patience`` consecutive checks showed it."""
    candidate = detect_rank_divergence(
        ranks.per_rank(), step=step, **kwargs_for(detect_rank_divergence, options["rank-divergence"])
    )
    return ranks.persistent(candidate, patience)


def input_shift(
    rows: Sequence[Sequence[float]], width: int, *, step: int, options: Options
) -> tuple[float | None, Diagnosis | None]:
    """The ranks' validation inputs against each other, from every rank's
    ``[mean..., std..., count..., kurtosis...]`` row (:meth:`InputStats.vector`).

    Returns:
        The largest shift measured (``None``: nothing to compare) and the diagnosis, if any.
    """
    fields = ("mean", "std", "count", "kurtosis")
    val = [{f: list(r[i * width : (i + 1) * width]) for i, f in enumerate(fields)} for r in rows]
    measured = rank_input_shift(val)
    shift = detect_input_shift(val, step=step, **kwargs_for(detect_input_shift, options["rank-divergence"]))
    return (measured[0] if measured else None), shift


def validation_gap(
    readings: TrainReadings, label_encoded: Sequence[Any], *, step: int, options: Options
) -> Diagnosis | None:
    """Train against validation at a validation: a label leak when the data holds label-encoded
    columns (:attr:`~lightning_order.checks.symptoms.RunFacts.label_encoded`), else the gap."""
    if label_encoded:
        return detect_label_leak(
            label_encoded, train_loss=readings.epoch_train[-1], val_loss=readings.epoch_val[-1], step=step
        )
    return detect_train_val_gap(
        readings.epoch_train,
        readings.epoch_val,
        step=step,
        train_spread=readings.train_spread,
        **options["train-val-gap"],
    )

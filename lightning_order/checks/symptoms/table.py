"""The diagnosis table (symptom -> the cause it can point to) and the :class:`Diagnosis` record.

A symptom is what a run shows; a cause is why. Four symptoms can come from an order error and
list the rule code they can point to; two (``data-starvation``, ``memory-swing``) are loader and
memory problems that no order of preparation causes, so they list none. A detector's diagnosis
names a rule only when its evidence separates the order error from the ordinary causes of the
same symptom (see :mod:`lightning_order.checks.symptoms.attribution`); otherwise its
``suspected_rule`` is ``None`` and it says what it saw and what to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightning_order.rules import RULES

__all__ = ["SYMPTOMS", "Diagnosis", "SymptomInfo", "new_diagnosis"]


@dataclass(frozen=True)
class SymptomInfo:
    """One row of the troubleshooting table.

    Attributes:
        suspected_rule: the rule code of the order error the symptom can point to, or ``None``
            for a symptom no order error causes (a loader or memory problem).
        signal: what the detector measures.
        explanation: why that cause produces the symptom.
        fix: what to do (or, with no order error named, what to check).
    """

    suspected_rule: str | None
    signal: str
    explanation: str
    fix: str


#: The troubleshooting table: symptom code -> what it points to. Stable codes, like rule codes.
SYMPTOMS: dict[str, SymptomInfo] = {
    "early-oscillation": SymptomInfo(
        "shard-before-normalize",
        "the loss swings hard in the first steps: large step-to-step changes that flip sign",
        "under DDP, ranks that normalised their shards with their own statistics pull the averaged "
        "gradients against each other; in one process the usual causes are a learning rate that "
        "is too high or inputs that were never standardised",
        "lower the learning rate or standardise the inputs; under DDP, fit the statistics once on "
        "the whole train split in prepare_data, then shard in setup",
    ),
    "plateau": SymptomInfo(
        "vocab-before-clean",
        "the loss does not fall from its start over a long window (not learning), or more input "
        "tokens are unknown than the vocabulary leaves on its own train text",
        "a vocabulary built before cleaning spends its slots on markup and '##' pieces, so the "
        "cleaned text the model sees maps to unknown tokens; a loss that does not fall with a "
        "sound vocabulary is a learning problem (labels, learning rate, model), not an order error",
        "clean -> split -> build_vocab on the cleaned train text, then lightning_order.recover(); "
        "when no vocabulary is at fault, check the labels, the learning rate and the model",
    ),
    "rank-divergence": SymptomInfo(
        "shard-before-normalize",
        "per-rank train losses differ beyond their own noise, or the ranks see their shares of one "
        "validation split through different input statistics",
        "each rank standardised its shard with its own statistics: the same raw value means "
        "different things on different ranks, and rows outside a rank's shard (its validation "
        "half) are mapped far off",
        "fit the statistics once on the whole train split in prepare_data, shard in setup; "
        "prepare once on rank 0 and shuffle before sharding",
    ),
    "train-val-gap": SymptomInfo(
        "train-val-overlap",
        "validation loss at or below the train loss from the start and falling as fast (leakage), "
        "or far above it (overfitting)",
        "validation labels reached training: validation rows that were also trained on (a split "
        "before cleaning or deduplication) or fitted features that learned from validation rows "
        "(target encoding, feature selection fitted before the split); a far-too-large gap means "
        "train and validation do not hold the same rows' distribution or the model memorises",
        "split by a hash of the cleaned key after cleaning, fit every learned feature on the train "
        "split only; OrderValidator names the step",
    ),
    "data-starvation": SymptomInfo(
        None,
        "most of each step's wall time is spent waiting for the next batch",
        "a loader problem, not an order error: preprocessing (tokenisation, feature maths) runs "
        "inside the training loop, in __getitem__ or collate, or too few loader workers",
        "move the work into the prepared, cached steps (OrderedDataModule's steps), or raise num_workers",
    ),
    "memory-swing": SymptomInfo(
        None,
        "on CUDA, allocated memory swings widely between steps",
        "a memory problem, not an order error: buffers created or moved every step (data moved "
        "to the device twice, lazy layers, tensors re-created per step) are allocated and freed",
        "keep data on the host until the batch transfer; create buffers once",
    ),
}

for _code, _info in SYMPTOMS.items():  # the table may only name real rule codes
    if _info.suspected_rule is not None and _info.suspected_rule not in RULES:  # pragma: no cover
        raise ValueError(f"symptom {_code!r} names unknown rule {_info.suspected_rule!r}")


@dataclass(frozen=True)
class Diagnosis:
    """A symptom seen in training, with the order error it points to when the evidence does.

    Attributes:
        symptom: a code of :data:`SYMPTOMS` (``early-oscillation``, ``plateau``, ...).
        step: the global step (or, for epoch-level symptoms, the step at that validation).
        suspected_rule: the rule code of the likely order error, or ``None`` when the evidence
            does not separate an order error from the symptom's ordinary causes.
        evidence: the numbers behind the verdict (``statistic``, ``baseline``, ``distance`` and
            the thresholds), plain JSON data.
        message: one readable line.
    """

    symptom: str
    step: int
    suspected_rule: str | None
    evidence: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    message: str = ""

    def __post_init__(self) -> None:
        if self.symptom not in SYMPTOMS:
            raise ValueError(f"unknown symptom {self.symptom!r}; expected one of {', '.join(SYMPTOMS)}")
        if self.suspected_rule is not None and self.suspected_rule not in RULES:
            raise ValueError(f"unknown rule code {self.suspected_rule!r}; expected one of {', '.join(RULES)}")

    @property
    def fix(self) -> str:
        """What to do, from :data:`SYMPTOMS`."""
        return SYMPTOMS[self.symptom].fix

    @property
    def names_order_error(self) -> bool:
        """Whether the diagnosis attributes the symptom to an order error."""
        return self.suspected_rule is not None

    def describe(self) -> str:
        """The diagnosis as a few readable lines."""
        info = SYMPTOMS[self.symptom]
        excluded = self.evidence.get("ruled_out") or {}
        why = f"     why: {info.explanation}\n"
        if self.suspected_rule is None and excluded:
            # The symptom as a symptom: its usual order causes are what the evidence excludes.
            reasons = "; ".join(f"{rule}: {reason}" for rule, reason in excluded.items())
            cause = f"likely order error: none (the run's evidence rules out {reasons})"
            why = ""
        elif self.suspected_rule is None:
            cause = "likely order error: none (the evidence does not point to one)"
        else:
            cause = f"likely order error: {self.suspected_rule} ({RULES[self.suspected_rule].title})"
        return (
            f"[{self.symptom}] at step {self.step}: {self.message}\n"
            f"     {cause}\n"
            f"{why}"
            f"     {'fix' if self.suspected_rule else 'check'}: {info.fix}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for checkpoints, logs and JSON)."""
        return {
            "symptom": self.symptom,
            "step": int(self.step),
            "suspected_rule": self.suspected_rule,
            "evidence": dict(self.evidence),
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        """Rebuilds a diagnosis from :meth:`to_dict` output."""
        return cls(
            symptom=data["symptom"],
            step=int(data["step"]),
            suspected_rule=data.get("suspected_rule"),
            evidence=dict(data.get("evidence", {})),
            message=data.get("message", ""),
        )


_LISTED = object()


def new_diagnosis(
    symptom: str, step: int, message: str, evidence: dict[str, Any], rule: Any = _LISTED
) -> Diagnosis:
    """A diagnosis with its float evidence rounded to 6 digits (what every detector returns).

    Args:
        symptom: a code of :data:`SYMPTOMS`.
        step: the global step.
        message: one readable line.
        evidence: the numbers behind the verdict.
        rule: the suspected rule code; by default the one the table lists for ``symptom``.
    """
    rounded = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in evidence.items()}
    named = SYMPTOMS[symptom].suspected_rule if rule is _LISTED else rule
    return Diagnosis(symptom, int(step), named, rounded, message)

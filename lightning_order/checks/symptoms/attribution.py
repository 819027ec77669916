"""From a symptom to a cause: name an order error only where the evidence separates it.

A detector says what a run shows. Whether an order error explains it depends on facts the curve
does not hold: whether the data keeps a vocabulary at all, what the validator's ledger proved
about the order, whether the validator found overlapping rows, how many ranks train.
:func:`attribute` takes a diagnosis and those facts (:class:`RunFacts`, plain data the monitor
gathers once) and returns the diagnosis with the rule the facts leave, ``None`` when they leave
none, or no diagnosis at all when the facts rule the symptom's only order cause out and the
symptom alone is no fault (unknown tokens of a vocabulary the ledger proves was built on the
cleaned train text are the vocabulary's cap, not an error).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from lightning_order.checks.symptoms.table import Diagnosis

__all__ = ["RunFacts", "attribute"]


@dataclass(frozen=True)
class RunFacts:
    """What is known about a run besides its training signals.

    Attributes:
        world_size: the number of ranks.
        validator: an ``OrderValidator`` ran before step 1 (so overlap and rank checks ran).
        rules: the rule codes the validator (or the ledger) reported.
        ledger_steps: the steps the datamodule's ledger recorded; ``None`` without a ledger.
        vocabulary: whether the data keeps a vocabulary (``None``: unknown).
        vocab_kind: ``"subword"`` (WordPiece, BPE, Unigram: covers its train text's alphabet),
            ``"word"`` (word-level: a cap leaves unknown tokens by design), or ``None``.
        label_encoded: per column, the evidence of a label-encoded feature fitted on train +
            validation rows (:func:`~lightning_order.checks.label_encoding.check_label_encoded_features`'s
            ``details["columns"]``); empty when the data shows none or was not checked.
    """

    world_size: int = 1
    validator: bool = False
    rules: frozenset[str] = frozenset()
    ledger_steps: frozenset[str] | None = None
    vocabulary: bool | None = None
    vocab_kind: Literal["subword", "word"] | None = None
    label_encoded: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(
        cls,
        *,
        world_size: int = 1,
        validator: bool = False,
        rules: Iterable[str] = (),
        ledger_steps: Iterable[str] | None = None,
        vocabulary: bool | None = None,
        vocab_kind: Literal["subword", "word"] | None = None,
        label_encoded: Iterable[Mapping[str, Any]] = (),
    ) -> RunFacts:
        """Builds facts from any iterables (a convenience for callers and tests)."""
        return cls(
            world_size,
            validator,
            frozenset(rules),
            None if ledger_steps is None else frozenset(ledger_steps),
            vocabulary,
            vocab_kind,
            tuple(label_encoded),
        )


def attribute(diagnosis: Diagnosis, facts: RunFacts) -> Diagnosis | None:
    """The diagnosis with the order error the facts point to (or none), or ``None`` when ruled out.

    Args:
        diagnosis: what a detector saw.
        facts: what else is known about the run.

    Returns:
        The diagnosis, its ``suspected_rule`` set from the facts and the reasoning added to its
        evidence (``attribution``), or ``None`` when the facts show the symptom is no fault.
    """
    trigger = diagnosis.evidence.get("trigger")
    kind = diagnosis.evidence.get("kind")
    if diagnosis.symptom == "plateau" and trigger == "unk-rate":
        return _unknown_tokens(diagnosis, facts)
    if diagnosis.symptom == "early-oscillation":
        if facts.world_size > 1 and "shard-before-normalize" in facts.rules:
            return _named(
                diagnosis,
                "shard-before-normalize",
                "the validator's ledger shows statistics fitted per shard",
            )
        return _named(
            diagnosis, None, "one rank's curve cannot tell per-shard statistics from a high learning rate"
        )
    if diagnosis.symptom == "rank-divergence":
        if "rank-mismatch" in facts.rules and "shard-before-normalize" not in facts.rules:
            return _named(diagnosis, "rank-mismatch", "the validator found ranks holding different data")
        if facts.ledger_steps is not None and {"fit_features", "shard"} <= facts.ledger_steps:
            if "shard-before-normalize" not in facts.rules:
                return _named(
                    diagnosis,
                    None,
                    "the ledger shows statistics fitted once before sharding: ranks differ otherwise",
                )
        return _named(
            diagnosis, diagnosis.suspected_rule, "ranks that share statistics do not differ like this"
        )
    if diagnosis.symptom == "train-val-gap" and kind == "overfitting":
        return _named(
            diagnosis,
            None,
            "validation far above train is memorising or splits that differ: no order error shown",
        )
    if diagnosis.symptom == "train-val-gap" and trigger == "label-encoded-feature":
        return _named(
            diagnosis, "fit-before-split", "the data holds a label encoding fitted on validation rows"
        )
    if diagnosis.symptom == "train-val-gap" and kind == "leakage":
        if "train-val-overlap" in facts.rules:
            return _named(diagnosis, "train-val-overlap", "the validator found validation rows also in train")
        if "fit-before-split" in facts.rules:
            return _named(
                diagnosis, "fit-before-split", "the validator's ledger shows a step fitted before the split"
            )
        if facts.validator:
            return _named(
                diagnosis,
                "fit-before-split",
                "the validator found no overlap of train and validation rows: a fitted feature that "
                "learned from validation labels is the cause left",
            )
        return _named(diagnosis, diagnosis.suspected_rule, "overlap or a feature fitted before the split")
    if diagnosis.symptom in ("data-starvation", "memory-swing"):
        return _named(diagnosis, None, "a loader or memory problem, not an order error")
    return diagnosis


def _unknown_tokens(diagnosis: Diagnosis, facts: RunFacts) -> Diagnosis | None:
    if facts.vocabulary is False:
        return None  # the data keeps no vocabulary: token ids are not words
    if "vocab-before-clean" in facts.rules:
        return _named(
            diagnosis,
            "vocab-before-clean",
            "the validator's ledger shows the vocabulary built before cleaning",
        )
    if facts.ledger_steps is not None and "build_vocab" in facts.ledger_steps:
        return None  # the ledger proves the vocabulary learned from the cleaned train text
    if facts.vocab_kind == "word":
        return None  # a word-level cap leaves unknown tokens on its own train text
    return _named(
        diagnosis,
        "vocab-before-clean",
        "a subword vocabulary leaves no unknown token on its own train text",
    )


def _named(diagnosis: Diagnosis, rule: str | None, why: str) -> Diagnosis:
    evidence = {**diagnosis.evidence, "attribution": why}
    return replace(diagnosis, suspected_rule=rule, evidence=evidence)

"""From a symptom to a cause: name an order error only where the evidence separates it.

A detector says what a run shows. Whether an order error explains it depends on facts the curve
does not hold: whether the data keeps a vocabulary at all, what the validator's ledger proved
about the order, whether the validator found overlapping rows, how many ranks train.
:func:`attribute` takes a diagnosis and those facts (:class:`RunFacts`, plain data the monitor
gathers once) and returns the diagnosis with the rule the facts leave, ``None`` when they leave
none, or no diagnosis at all when the facts rule the symptom's only order cause out and the
symptom alone is no fault (unknown tokens of a vocabulary the ledger proves was built on the
cleaned train text are the vocabulary's cap, not an error).

Evidence wins over curves: :func:`ruled_out` lists the rule codes the run's evidence excludes
(every fitted step learned from the train split, the split by a key hash, the overlap and
label-encoding checks' verdicts, ranks proven alike), and :func:`attribute` never names one of
them. A symptom whose order causes are all excluded is still reported, as a symptom with what it
measured and the evidence that excludes each cause, never as an order error. The trade-off: an
order error the evidence wrongly excludes is not named from a curve either; the evidence comes
from checks that read the data itself, which a loss curve cannot overrule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from lightning_order.checks.symptoms.table import Diagnosis

__all__ = ["OVERLAP_PROOFS", "RunFacts", "attribute", "ruled_out"]

#: The overlap evidence that excludes ``train-val-overlap`` when the check found none, and what it showed.
OVERLAP_PROOFS = {
    "key-hash": "the validator compared the key hashes of both splits and found no key on both sides",
    "content": "the validator hashed every item of both splits and found no more validation rows with a "
    "train twin than its threshold",
    "token-stream": "the validator checked every validation window against every train token and found no "
    "more validation windows inside documents the train split holds too than its threshold",
}


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
        fitted_on_train: the ledger shows every fitted step learned from a split's train part
            (``False``: one did not; ``None``: no ledger, no split, or a fitted step whose data
            is unknown).
        split_by_key: the ledger's split assigns rows by a hash of their (cleaned) key and the
            ledger judges it in order, so no key is on both sides (``None``: not known).
        overlap_check: what the validator's train/validation overlap check compared:
            ``"key-hash"``, ``"content"`` (every item) and ``"token-stream"`` (every window
            against every train token) exclude an overlap they did not find;
            ``"content-sample"`` and ``"rows-sample"`` (sampled rows) do not; ``None``: no check.
        label_checked: the label-encoding check read the splits' float columns (or found none
            that could hold an encoding) and gave its verdict: with ``label_encoded`` empty, no
            label-aware feature was fitted on validation rows.
        same_rows_floats: under DDP the validator compared the float columns of the very same
            rows on every rank (a split every rank holds whole) and found them alike: no rank
            normalised with statistics of its own shard.
    """

    world_size: int = 1
    validator: bool = False
    rules: frozenset[str] = frozenset()
    ledger_steps: frozenset[str] | None = None
    vocabulary: bool | None = None
    vocab_kind: Literal["subword", "word"] | None = None
    label_encoded: tuple[Mapping[str, Any], ...] = ()
    fitted_on_train: bool | None = None
    split_by_key: bool | None = None
    overlap_check: str | None = None
    label_checked: bool = False
    same_rows_floats: bool = False

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
        fitted_on_train: bool | None = None,
        split_by_key: bool | None = None,
        overlap_check: str | None = None,
        label_checked: bool = False,
        same_rows_floats: bool = False,
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
            fitted_on_train,
            split_by_key,
            overlap_check,
            label_checked,
            same_rows_floats,
        )


def ruled_out(facts: RunFacts) -> dict[str, str]:
    """The rule codes the run's evidence excludes, each with the evidence that does.

    A rule the validator (or the ledger) reported is never excluded. Otherwise:

    * ``fit-before-split``: the ledger shows every fitted step learned from the train split,
      *and* the label-encoding check gave its verdict and found nothing (a target encoding
      computed before the pipeline, as a column of the input file, is in no ledger);
    * ``train-val-overlap``: the validator compared every key hash (or every item's content)
      of both splits and found none on both sides, or the ledger shows a split by key hash;
    * ``shard-before-normalize``: the ledger shows the statistics fitted once, on the train
      split (or fitted, then sharded, with no per-shard fit reported), or under DDP the validator
      found the float columns of the same rows alike on every rank;
    * ``vocab-before-clean``: the ledger shows the vocabulary built, and not before cleaning;
    * ``rank-mismatch``: under DDP the validator compared every rank's data and found it alike.

    Args:
        facts: what is known about the run.

    Returns:
        ``{rule: why}`` for every excluded rule (empty when the run has no such evidence).
    """
    rules, steps = facts.rules, facts.ledger_steps or frozenset()
    out: dict[str, str] = {}
    if (
        "fit-before-split" not in rules
        and facts.fitted_on_train
        and facts.label_checked
        and not facts.label_encoded
    ):
        out["fit-before-split"] = (
            "the ledger shows every fitted step learned from the train split only, and the "
            "label-encoding check found no feature fitted on validation labels"
        )
    if "train-val-overlap" not in rules:
        if facts.overlap_check in OVERLAP_PROOFS:
            out["train-val-overlap"] = OVERLAP_PROOFS[facts.overlap_check]
        elif facts.split_by_key:
            out["train-val-overlap"] = "the ledger shows the split assigns every row by a hash of its key"
    if "shard-before-normalize" not in rules and (
        facts.fitted_on_train or {"fit_features", "shard"} <= steps
    ):
        out["shard-before-normalize"] = (
            "the ledger shows the statistics fitted once on the train split, before sharding"
        )
    elif "shard-before-normalize" not in rules and facts.validator and facts.same_rows_floats:
        out["shard-before-normalize"] = (
            "the validator found the float columns of the same rows alike on every rank before step 1"
        )
    if "vocab-before-clean" not in rules and "build_vocab" in steps:
        out["vocab-before-clean"] = "the ledger shows the vocabulary built on the cleaned train text"
    if "rank-mismatch" not in rules and facts.validator and facts.world_size > 1:
        out["rank-mismatch"] = "the validator compared every rank's data before step 1 and found it alike"
    return out


def attribute(diagnosis: Diagnosis, facts: RunFacts) -> Diagnosis | None:
    """The diagnosis with the order error the facts point to (or none), or ``None`` when ruled out.

    Args:
        diagnosis: what a detector saw.
        facts: what else is known about the run.

    Returns:
        The diagnosis, its ``suspected_rule`` set from the facts and the reasoning added to its
        evidence (``attribution``; the rules the evidence excludes in ``ruled_out``), or ``None``
        when the facts show the symptom is no fault. The rule named is never one of
        :func:`ruled_out`'s.
    """
    named = _attribute(diagnosis, facts)
    return None if named is None else _respect_evidence(named, ruled_out(facts))


def _attribute(diagnosis: Diagnosis, facts: RunFacts) -> Diagnosis | None:
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
        if (
            trigger == "inputs"
            and facts.validator
            and facts.same_rows_floats
            and "shard-before-normalize" not in facts.rules
        ):
            # The validator saw the same rows alike on every rank: the shift is the shares' sampling.
            return None
        if "rank-mismatch" in facts.rules and "shard-before-normalize" not in facts.rules:
            return _named(diagnosis, "rank-mismatch", "the validator found ranks holding different data")
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


def _respect_evidence(diagnosis: Diagnosis, excluded: Mapping[str, str]) -> Diagnosis:
    """The diagnosis with no rule the evidence excludes: the next candidate it leaves, else none."""
    rule = diagnosis.suspected_rule
    if rule is None or rule not in excluded:
        return diagnosis
    candidates = [rule, *(c for c in diagnosis.evidence.get("candidates", ()) if c != rule)]
    left = next((c for c in candidates if c not in excluded), None)
    against = {c: excluded[c] for c in candidates if c in excluded}
    if left is None:
        why = "the run's evidence rules out every order error behind this symptom: " + "; ".join(
            f"{c}: {reason}" for c, reason in against.items()
        )
    else:
        why = f"the run's evidence rules out {', '.join(against)}; {left} is the cause left"
    evidence = {**diagnosis.evidence, "attribution": why, "ruled_out": against}
    return replace(diagnosis, suspected_rule=left, evidence=evidence)


def _unknown_tokens(diagnosis: Diagnosis, facts: RunFacts) -> Diagnosis | None:
    if facts.vocabulary is False:
        return None  # the data keeps no vocabulary: token ids are not words
    if "vocab-before-clean" in facts.rules:
        return _named(
            diagnosis,
            "vocab-before-clean",
            "the validator's ledger shows the vocabulary built before cleaning",
        )
    if "vocab-before-clean" in ruled_out(facts):
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

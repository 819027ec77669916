"""``documents-truncated``: documents cut by the tokenizer before packing.

Two signals, either enough: the supplied tokenizer truncates (read off a ``tokenizers``
``Tokenizer.truncation`` or a ``transformers`` tokenizer's backend by the gatherer), and the
data: the lengths of the documents seen whole pile up at their maximum (truncation cuts every
long document to the same length, which no natural corpus does; read within sampled rows, and
across the first train rows joined in index order, where documents cut at a context longer than
a row are seen whole). The pile must hold
:data:`MIN_PILE` documents and :data:`PILE_SHARE` of those seen, at the longest length seen, so
a few documents of equal length never decide. Pure functions of plain numbers; the lengths come
from :func:`~lightning_order.checks.token_rows.document_lengths`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lightning_order.rules import Violation

__all__ = ["MIN_PILE", "PILE_SHARE", "AnswersKept", "Pile", "check_answers_cut_away", "check_truncation", "length_pile"]

#: Documents at one length before it is a pile.
MIN_PILE = 8
#: The share of documents seen whole at one length before it is a pile.
PILE_SHARE = 0.25
#: A ``max_length`` at or above this is ``model_max_length``'s "no limit" sentinel, not a truncation.
NO_LIMIT = 10**9


@dataclass(frozen=True)
class Pile:
    """Documents seen whole whose lengths pile up at the longest length seen.

    Attributes:
        length: the length (tokens, end-of-text included).
        count: documents of that length.
        seen: documents seen whole.
        source: where they were seen, for the message.
    """

    length: int
    count: int
    seen: int
    source: str = "the sampled train rows"


def length_pile(lengths: np.ndarray, source: str | None = None) -> Pile | None:
    """The pile at the longest length, when it holds :data:`MIN_PILE` and :data:`PILE_SHARE` of the documents.

    Args:
        lengths: the lengths of the documents seen whole.
        source: where they were seen (``None``: the sampled train rows).
    """
    lengths = np.asarray(lengths)
    lengths = lengths[lengths > 0]
    if not lengths.size:
        return None
    longest = int(lengths.max())
    count = int((lengths == longest).sum())
    if count < MIN_PILE or count < PILE_SHARE * lengths.size:
        return None
    seen = int(lengths.size)
    return Pile(longest, count, seen) if source is None else Pile(longest, count, seen, source)


def check_truncation(
    max_length: int | None, pile: Pile | None, where: str = "the tokenizer", *, padded: bool = False
) -> list[Violation]:
    """``documents-truncated`` when the tokenizer truncates or the lengths pile up.

    Args:
        max_length: the supplied tokenizer's truncation length, ``None`` when it does not truncate.
        pile: :func:`length_pile` of the sampled train rows.
        where: the tokenizer's name, for the message.
        padded: the rows are padded, one document each (``details["padded"]``): truncating them to the
            context is how fine-tuning rows are made, so the validator only warns (a row cut down to
            no target at all is ``rows-without-target``, read off step 1); packed blocks were cut
            before packing, which loses document ends for nothing.
    """
    if max_length is not None and max_length >= NO_LIMIT:
        max_length = None
    if max_length is None and pile is None:
        return []
    found = []
    if max_length is not None:
        found.append(f"{where} truncates to {max_length} tokens")
    if pile is not None:
        found.append(
            f"{pile.count} of {pile.seen} documents seen whole in {pile.source} are exactly "
            f"{pile.length} tokens long, the longest length seen"
        )
    if padded:
        return [
            Violation(
                "documents-truncated",
                ("encode", "train"),
                "padded one-document rows were truncated: " + "; ".join(found) + ". Fine if on purpose (the "
                "context is shorter than the documents); keep each row's answer and end inside max_length",
                details={
                    "max_length": max_length,
                    "pile": asdict(pile) if pile is not None else None,
                    "padded": True,
                },
            )
        ]
    return [
        Violation(
            "documents-truncated",
            ("encode", "pack"),
            "documents were truncated before packing: " + "; ".join(found) + ". Tokenize without truncation "
            "(truncation=False, or tokenizer.no_truncation()) and let packing cut blocks",
            details={"max_length": max_length, "pile": asdict(pile) if pile is not None else None},
        )
    ]


@dataclass(frozen=True)
class AnswersKept:
    """Instruction rows read again with their prompt masked: how many keep any of their answer.

    Read off a dataset that trains on its prompts too (litgpt's ``SFTDataset`` with
    ``mask_prompt=False``): its rows always have targets, so a row cut inside its prompt, which
    holds no answer at all, is not seen by ``rows-without-target`` at step 1. Masking the prompt
    on a copy shows it: such a row has no target left.

    Attributes:
        rows: rows read.
        without_answer: rows with every target ignored once the prompt is masked.
        max_seq_length: the dataset's cut (``None`` when it names none).
    """

    rows: int
    without_answer: int
    max_seq_length: int | None = None


def check_answers_cut_away(kept: AnswersKept | None) -> list[Violation]:
    """``rows-without-target`` when rows trained on their prompt keep none of their answer.

    Any such row is reported (as ``rows-without-target`` reports any row without a target): a
    correct instruction row always keeps some answer, however long it is cut.
    """
    if kept is None or not kept.without_answer:
        return []
    cut = f"max_seq_length={kept.max_seq_length} ends them" if kept.max_seq_length else "they end"
    return [
        Violation(
            "rows-without-target",
            ("train", "encode"),
            f"{kept.without_answer} of the first {kept.rows} training rows keep none of their answer: {cut} "
            "inside the prompt, and with mask_prompt=False they train on the prompt alone (the model "
            "learns to continue instructions, never to answer them)",
            details=asdict(kept),
        )
    ]

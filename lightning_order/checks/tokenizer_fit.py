"""``vocab-before-clean`` with no record: a tokenizer whose merges hold markup the cleaned data never uses.

A BPE learns a merge only from pairs that are frequent in the text it is trained on, so a
tokenizer trained on the cleaned train text uses most of its merged entries on that text, and
the markup-like ones among them (``<p``, ``="``, ``href``, ``://``, ``&amp``) only where the clean
text holds such pieces. Trained on the raw (HTML) pages and then fed the cleaned text, it keeps
tens of markup merges that the data never uses (benchmarks/tokenizer_fit_lab.py, docs/lm.md).

Two conditions guard against false alarms, both measured: the train sample must use at least
:data:`MIN_USED_MERGE_SHARE` of the merges (a tokenizer trained elsewhere, on other text, uses
little of its vocabulary here and is not judged: its markup says nothing about this run's order),
and most of the markup merges must be unused (:data:`MIN_UNUSED_MARKUP_SHARE`) and at least
:data:`MIN_UNUSED_MARKUP` of them (a few rare ones are sampling noise).

A tokenizer fitted on train + validation text (``fit-before-split``) leaves no such trace in the
tokens: the lab found no signal that separates it (docs/lm.md), so nothing here judges it.
Pure functions of plain data: the gathering is :mod:`lightning_order.callbacks.validator.lm`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from lightning_order.rules import Violation

__all__ = [
    "MARKUP_PIECES",
    "MIN_UNUSED_MARKUP",
    "MIN_UNUSED_MARKUP_SHARE",
    "MIN_USED_MERGE_SHARE",
    "TokenizerFitEvidence",
    "check_tokenizer_fit",
    "tokenizer_fit_evidence",
]

#: Pieces of text that mark an entry as markup-like (HTML tags, attributes, entities, links).
MARKUP_PIECES = ("<", ">", "&", '="', "div", "href", "://", "class", "span")
#: Unused markup merges from which the tokenizer is judged (the lab: 11 to 21 when planted, 0 or 1 when correct).
MIN_UNUSED_MARKUP = 8
#: The share of the markup merges that must be unused (planted: 0.74 to 1.0; correct: at most 0.5).
MIN_UNUSED_MARKUP_SHARE = 0.6
#: The share of all merges the train sample must use for the tokenizer to count as fitted on this
#: text (planted and correct: 0.6 to 0.85; a tokenizer trained on other text: 0.2 or less).
MIN_USED_MERGE_SHARE = 0.4
#: How many unused markup entries a message shows.
_SHOWN = 8


@dataclass(frozen=True)
class TokenizerFitEvidence:
    """What :func:`check_tokenizer_fit` reads: the tokenizer's merges and which the train sample uses.

    Attributes:
        merges: merged entries (two characters or more, special tokens left out).
        used_merges: how many of them the sampled train tokens use.
        markup: the markup-like merges' texts.
        unused_markup: the markup-like merges' texts that the sampled train tokens never use.
        sampled_tokens: how many train tokens were read.
    """

    merges: int
    used_merges: int
    markup: tuple[str, ...]
    unused_markup: tuple[str, ...]
    sampled_tokens: int

    @property
    def used_merge_share(self) -> float:
        """The share of the merges the train sample uses (0 without merges)."""
        return self.used_merges / self.merges if self.merges else 0.0


def _is_markup(text: str) -> bool:
    return len(text.strip()) >= 2 and any(piece in text for piece in MARKUP_PIECES)


def tokenizer_fit_evidence(
    vocab: Mapping[int, str],
    used_ids: Collection[int],
    special_ids: Collection[int] = (),
    sampled_tokens: int = 0,
) -> TokenizerFitEvidence:
    """The evidence, from the decoded vocabulary and the ids the sampled train tokens hold.

    Args:
        vocab: every id of the tokenizer and its decoded text.
        used_ids: the ids that occur in the sampled train tokens.
        special_ids: ids of special or added tokens (left out: they are no merge).
        sampled_tokens: how many train tokens were read (for the message).
    """
    used, special = set(used_ids), set(special_ids)
    merges = {i: text for i, text in vocab.items() if i not in special and len(text) >= 2}
    markup = {i: text for i, text in merges.items() if _is_markup(text)}
    return TokenizerFitEvidence(
        merges=len(merges),
        used_merges=sum(i in used for i in merges),
        markup=tuple(markup[i] for i in sorted(markup)),
        unused_markup=tuple(markup[i] for i in sorted(markup) if i not in used),
        sampled_tokens=int(sampled_tokens),
    )


def check_tokenizer_fit(evidence: TokenizerFitEvidence) -> list[Violation]:
    """``vocab-before-clean``: the tokenizer learned markup that the cleaned train data never holds.

    Args:
        evidence: from :func:`tokenizer_fit_evidence`.
    """
    unused, markup = evidence.unused_markup, evidence.markup
    if (
        evidence.used_merge_share < MIN_USED_MERGE_SHARE
        or len(unused) < MIN_UNUSED_MARKUP
        or len(unused) < MIN_UNUSED_MARKUP_SHARE * len(markup)
    ):
        return []
    shown = ", ".join(repr(text) for text in unused[:_SHOWN]) + (", ..." if len(unused) > _SHOWN else "")
    return [
        Violation(
            "vocab-before-clean",
            ("build_vocab", "clean"),
            f"the tokenizer holds {len(unused)} markup-like merged entries ({shown}) that none of "
            f"{evidence.sampled_tokens:,} sampled train tokens uses, of {len(markup)} markup-like entries, "
            f"while the sample uses {evidence.used_merge_share:.0%} of its merges: it was trained on raw "
            "text (markup included) and fed the cleaned text; train the tokenizer on the cleaned train "
            "documents (clean -> split -> build_vocab), or pass a tokenizer trained elsewhere on purpose",
            details={
                "unused_markup": list(unused[:50]),
                "markup": len(markup),
                "merges": evidence.merges,
                "used_merges": evidence.used_merges,
                "sampled_tokens": evidence.sampled_tokens,
            },
        )
    ]

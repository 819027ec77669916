"""``bos-mismatch``: documents that start differently in training than at inference, or than in validation.

Three ways one decision (does a document open with BOS?) goes wrong without a crash, judged as
one rule with the evidence in ``details``: BOS twice at document starts (``"<s>" + text`` through
a post-processor that adds ``<s>`` again); BOS at the starts of one split and not the other
(validation tokenized with ``add_special_tokens=False``); training starts without the BOS the
tokenizer adds at inference. A BOS in training that the tokenizer does not add (a BOS-first
packing by hand) is not judged: the user's generation code may add it. Pure functions over the
document starts of :func:`~lightning_order.checks.token_rows.document_starts`; each judgement
needs :data:`MIN_STARTS` starts and a clear share, so a few odd rows never decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from lightning_order.rules import Violation

__all__ = ["MIN_STARTS", "StartCounts", "check_bos", "count_starts"]

#: Document starts a split must show before its BOS share is judged.
MIN_STARTS = 8
#: A share at or above this is "every document"; at or below ``1 - CLEAR_SHARE``, "none".
CLEAR_SHARE = 0.9
#: The share of starts opening with BOS twice from which it is the pipeline's doing, not a stray row.
TWICE_SHARE = 0.5


@dataclass(frozen=True)
class StartCounts:
    """The document starts seen in one split's sampled rows.

    Attributes:
        starts: document starts seen.
        with_bos: starts opening with BOS.
        with_two: starts opening with BOS twice.
    """

    starts: int
    with_bos: int
    with_two: int

    def share(self, count: int) -> float:
        """``count`` as a share of the starts (0 with none)."""
        return count / self.starts if self.starts else 0.0


def count_starts(starts: Sequence[tuple[int, int | None]], bos_id: int) -> StartCounts:
    """:class:`StartCounts` of ``(first, second)`` token pairs at document starts."""
    with_bos = sum(first == bos_id for first, _ in starts)
    with_two = sum(first == bos_id and second == bos_id for first, second in starts)
    return StartCounts(len(starts), with_bos, with_two)


def _evidence(train: StartCounts, val: StartCounts | None, adds_bos: bool | None) -> list[str]:
    found = []
    if train.starts >= MIN_STARTS and train.share(train.with_two) >= TWICE_SHARE:
        found.append(f"{train.with_two} of {train.starts} train document starts open with BOS twice")
    if val is not None and min(train.starts, val.starts) >= MIN_STARTS:
        shares = {"train": train.share(train.with_bos), "validation": val.share(val.with_bos)}
        if max(shares.values()) >= CLEAR_SHARE and min(shares.values()) <= 1 - CLEAR_SHARE:
            found.append(
                f"BOS opens {train.with_bos} of {train.starts} train and {val.with_bos} of {val.starts} "
                "validation document starts"
            )
    if adds_bos and train.starts >= MIN_STARTS and train.share(train.with_bos) <= 1 - CLEAR_SHARE:
        found.append(
            f"the tokenizer adds BOS at inference, and only {train.with_bos} of {train.starts} train "
            "document starts open with it"
        )
    return found


def check_bos(
    train: StartCounts, val: StartCounts | None, adds_bos: bool | None, bos_id: int | None
) -> list[Violation]:
    """``bos-mismatch`` from the document starts of the train (and validation) sample.

    Args:
        train: the train split's starts (:func:`count_starts`).
        val: the validation split's, or ``None`` when it was not sampled.
        adds_bos: whether the tokenizer's post-processor opens an encoded text with BOS (``None``: unknown).
        bos_id: the BOS id, named in the message.
    """
    found = _evidence(train, val, adds_bos)
    if not found or bos_id is None:
        return []
    return [
        Violation(
            "bos-mismatch",
            ("encode", "train"),
            f"documents do not start with BOS ({bos_id}) the way the tokenizer starts them: "
            + "; ".join(found)
            + ". Let the tokenizer add BOS exactly once, the same way for every split",
            details={
                "bos_id": bos_id,
                "adds_bos": adds_bos,
                "train": asdict(train),
                "val": asdict(val) if val is not None else None,
                "evidence": found,
            },
        )
    ]

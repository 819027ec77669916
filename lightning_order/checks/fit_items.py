"""``fit-before-split`` by content: a fitted step whose input holds validation (or test) items.

The recorder stores on such a step's record, per held-out part, ``[matched, sampled, count]``:
how many of the part's sampled item hashes (:mod:`lightning_order.item_hashes`) its input held.
Rule: it fires when at least ``MIN_COUNT`` sampled items matched AND they are at least
``MIN_SHARE`` of the sample, so a few items equal across splits by chance (empty lines, short
headers) stay silent. With a sample of ``s`` items, a leak of share ``p`` is missed only when
fewer than ``MIN_SHARE * s`` of them match, which for ``p`` well above ``MIN_SHARE`` is negligible.
"""

from __future__ import annotations

from collections.abc import Iterable

from lightning_order.ledger import StepRecord
from lightning_order.rules import Violation

__all__ = ["MIN_COUNT", "MIN_SHARE", "check_fitted_items"]

#: Matched sampled items needed at least.
MIN_COUNT = 5
#: Share of the sampled held-out items needed at least.
MIN_SHARE = 0.1


def check_fitted_items(records: Iterable[StepRecord]) -> list[Violation]:
    """One ``fit-before-split`` per fitted step whose input held enough held-out items."""
    found = []
    for record in records:
        for part, (matched, sampled, count) in (record.stats.get("held_out_seen") or {}).items():
            if matched < MIN_COUNT or sampled == 0 or matched / sampled < MIN_SHARE:
                continue
            seen = round(matched / sampled * count)
            found.append(
                Violation(
                    "fit-before-split",
                    (record.step, "split"),
                    f"{record.step} learned from {seen} of the {count} {part} items: "
                    f"fit it on the train split only",
                    details={"part": part, "matched": matched, "sampled": sampled, "count": count},
                )
            )
    return found

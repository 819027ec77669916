"""``mixture-off-weight``: do a mixture's realised train token shares match its stated weights?

:func:`check_mixture` is a pure function of plain data: the sources, their weights, the
realised shares of the train tokens and the tolerance. :func:`mixture_evidence` reads them from
a ledger: ``pack``'s ``mixture`` record (what the draw gives, :mod:`lightning_order.data.lm.mixture`)
and, once ``shard`` ran, what its first epoch really serves and the tolerance of this run
(``mixture_shares``, ``mixture_tolerance``). :func:`check_mixture_records` judges a ledger alone
(the LM spec's ledger check: the validator and ``audit`` ask it). A ledger without a mixture has
nothing to judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lightning_order.rules import Violation

if TYPE_CHECKING:
    from lightning_order.ledger import StepLedger

__all__ = ["DEFAULT_TOLERANCE", "check_mixture", "check_mixture_records", "mixture_evidence"]

#: The tolerance when none was recorded: one percentage point.
DEFAULT_TOLERANCE = 0.01


def check_mixture(
    sources: Sequence[str],
    weights: Sequence[float],
    shares: Sequence[float],
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Violation]:
    """``mixture-off-weight`` for each source whose realised share strays from its weight by more than ``tolerance``.

    Args:
        sources: the sources' names.
        weights: their weights (normalised here to sum to 1).
        shares: their realised shares of the train tokens.
        tolerance: the most a share may stray (a fraction: 0.01 is one point).
    """
    total = float(sum(weights))
    off = []
    for name, weight, share in zip(sources, weights, shares):
        wanted = float(weight) / total if total else 0.0
        if abs(float(share) - wanted) > float(tolerance) + 1e-12:
            off.append((name, wanted, float(share)))
    if not off:
        return []
    listed = "; ".join(f"source {name!r}: weight {w:.2%}, realised {s:.2%}" for name, w, s in off)
    return [
        Violation(
            "mixture-off-weight",
            ("shard", "pack"),
            f"the train tokens drawn from the mixture stray from the weights by more than ±{tolerance * 100:g} "
            f"points: {listed}",
            details={
                "sources": [name for name, _, _ in off],
                "weights": [w for _, w, _ in off],
                "shares": [s for _, _, s in off],
                "tolerance": float(tolerance),
            },
        )
    ]


def mixture_evidence(ledger: StepLedger) -> dict[str, Any] | None:
    """``{"sources", "weights", "shares", "tolerance"}`` of the ledger's mixture; ``None`` when it holds none."""
    pack = ledger.latest("pack")
    mixture = pack.stats.get("mixture") if pack is not None else None
    if not isinstance(mixture, Mapping):
        return None
    shard = ledger.latest("shard")
    served = shard.stats.get("mixture_shares") if shard is not None else None
    tolerance = shard.params.get("mixture_tolerance") if shard is not None else None
    return {
        "sources": list(mixture["sources"]),
        "weights": list(mixture["weights"]),
        "shares": list(served if served is not None else mixture["shares"]),
        "tolerance": float(
            tolerance if tolerance is not None else mixture.get("tolerance", DEFAULT_TOLERANCE)
        ),
    }


def check_mixture_records(ledger: StepLedger) -> list[Violation]:
    """:func:`check_mixture` on what ``ledger`` recorded (no mixture: nothing to judge)."""
    evidence = mixture_evidence(ledger)
    if evidence is None:
        return []
    return check_mixture(evidence["sources"], evidence["weights"], evidence["shares"], evidence["tolerance"])

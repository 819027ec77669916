"""Rates estimated from a sample: a count, the sample it came from, and a confidence interval.

Every rate the validator extrapolates from sampled rows, windows or documents (train/validation
twins, packed-document overlap, end-of-text ids) is a :class:`RateEstimate`: the hits, the
sample size, the share of the other side the sample could have matched against (``coverage``),
and the Wilson score interval at :data:`CONFIDENCE`. A check raises from an estimate only when
the whole interval is on the wrong side of its threshold *and* the estimate rests on at least
:data:`MIN_HITS` hits: one coincidental match in a small sample is reported as what it is, never
extrapolated into a violation. Exact counts over whole splits are facts, not estimates
(``exact=True``): the rate itself decides.

The Wilson score interval (Wilson, 1927) keeps its coverage near the stated level for small
samples and rates near 0 or 1, where the normal approximation collapses to a zero-width interval.
Pure functions of plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

__all__ = ["CONFIDENCE", "MIN_HITS", "RateEstimate", "wilson_interval"]

#: The confidence level of every interval the checks report (two-sided).
CONFIDENCE = 0.95
#: The fewest hits an extrapolated rate needs before a check may raise from it.
MIN_HITS = 5


def wilson_interval(hits: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion.

    Examples:
        >>> low, high = wilson_interval(0, 100)
        >>> low, round(high, 4)
        (0.0, 0.037)

    Args:
        hits: successes observed (``0 <= hits <= n``).
        n: trials (sample size); ``0`` gives ``(0.0, 1.0)``: no evidence.
        confidence: the two-sided confidence level, in ``(0, 1)``.

    Returns:
        ``(low, high)``, both within ``[0, 1]``.

    Raises:
        ValueError: ``hits`` outside ``[0, n]``, or ``confidence`` outside ``(0, 1)``.
    """
    if not 0 <= hits <= n:
        raise ValueError(f"wilson_interval: expected 0 <= hits <= n, got hits={hits}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"wilson_interval: expected a confidence in (0, 1), got {confidence}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = hits / n
    denominator = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / denominator
    # At the edges the bounds are exactly 0 and 1 (rounding would leave 1e-17 off).
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class RateEstimate:
    """A rate measured on a sample, extrapolated to the whole split with its uncertainty.

    Attributes:
        hits: the sampled units that showed the property (e.g. validation documents with a train twin).
        n: the sampled units.
        coverage: the share of the reference the sample could be matched against (e.g. the share
            of train documents read); the observed rate is divided by it. ``1.0`` when all of it was.
        exact: every unit of the split was counted against all of the reference (no extrapolation).
        confidence: the interval's level.
    """

    hits: int
    n: int
    coverage: float = 1.0
    exact: bool = False
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if not 0 <= self.hits <= self.n:
            raise ValueError(f"RateEstimate: expected 0 <= hits <= n, got hits={self.hits}, n={self.n}")
        if not 0.0 < self.coverage <= 1.0:
            raise ValueError(f"RateEstimate: expected a coverage in (0, 1], got {self.coverage}")

    @property
    def rate(self) -> float:
        """The extrapolated rate: ``hits / n / coverage``, at most 1."""
        return min(1.0, self.hits / self.n / self.coverage) if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The Wilson interval of ``hits / n``, divided by ``coverage`` (each bound at most 1)."""
        low, high = wilson_interval(self.hits, self.n, self.confidence)
        return min(1.0, low / self.coverage), min(1.0, high / self.coverage)

    def above(self, threshold: float) -> bool:
        """Whether the rate is beyond ``threshold`` on this evidence: the rate itself for an exact
        count; for an estimate, at least :data:`MIN_HITS` hits and the whole interval above it."""
        if self.exact:
            return self.hits > 0 and self.rate > threshold
        return self.hits >= MIN_HITS and self.interval[0] > threshold

    def below(self, threshold: float) -> bool:
        """Whether the rate is confidently below ``threshold``: the whole interval under it."""
        return self.interval[1] < threshold

    def describe(self, units: str = "units") -> str:
        """``19.0% (24 of 126 units; 95% interval 13.1-26.8%)``, with the coverage when extrapolated."""
        low, high = self.interval
        covered = (
            "" if self.coverage >= 1.0 else f", extrapolated from {_percent(self.coverage)} of the reference"
        )
        scope = "all" if self.exact else "sampled"
        return (
            f"{_percent(self.rate)} ({self.hits} of {self.n} {scope} {units}{covered}; "
            f"{self.confidence:.0%} interval {_percent(low, sign=False)}-{_percent(high)})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a violation's ``details`` (JSON-able)."""
        low, high = self.interval
        return {
            "hits": self.hits,
            "sampled": self.n,
            "coverage": self.coverage,
            "rate": self.rate,
            "interval": [low, high],
            "confidence": self.confidence,
            "exact": self.exact,
            "min_hits": MIN_HITS,
        }


def _percent(value: float, sign: bool = True) -> str:
    digits = 1 if value >= 0.001 or value == 0 else 3
    return f"{value * 100:.{digits}f}{'%' if sign else ''}"

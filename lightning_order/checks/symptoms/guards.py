"""What every detector does to its readings first: drop non-finite values, refuse bad thresholds.

A loss of ``nan`` or ``inf`` (an overflow, a rank that had no batch) says nothing about the
order of preparation, so the detectors judge the finite readings only; a threshold that is not
positive is a caller's mistake, refused with the argument's name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["finite_values", "require_positive"]


def finite_values(values: Sequence[float]) -> list[float]:
    """``values`` as floats, without the non-finite ones (the list itself when all are finite)."""
    floats = list(map(float, values))
    return floats if all(map(math.isfinite, floats)) else [v for v in floats if math.isfinite(v)]


def require_positive(**values: float) -> None:
    """Raises ``ValueError`` naming the first argument that is not ``> 0``."""
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")

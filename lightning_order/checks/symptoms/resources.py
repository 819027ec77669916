"""Detectors of loader and memory problems: data starvation and memory swings (no order error causes them)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from lightning_order.checks.symptoms.guards import finite_values, require_positive
from lightning_order.checks.symptoms.table import Diagnosis, new_diagnosis

__all__ = ["detect_data_starvation", "detect_memory_swing"]


def detect_data_starvation(
    wait_times: Sequence[float],
    step_times: Sequence[float],
    *,
    step: int = 0,
    min_steps: int = 20,
    max_wait_share: float = 0.5,
    min_wait_s: float = 0.02,
) -> Diagnosis | None:
    """Most of each step's wall time is spent waiting for the next batch.

    ``wait_times[i]`` is the time between the end of step ``i - 1`` and the start of step ``i``
    (fetching the batch: loading, collating, and any preprocessing done there); ``step_times[i]``
    the time from the start to the end of step ``i``. Starved when, over the last ``min_steps``
    or more, the median wait share ``wait / (wait + step)`` exceeds ``max_wait_share`` *and* the
    median wait exceeds ``min_wait_s`` (a tiny model on fast, cached data waits a few
    milliseconds for collation, which is no order error).

    Args:
        wait_times: seconds waited before each step.
        step_times: seconds each step took (on CUDA, host time: kernels are launched, not
            awaited, so a GPU-bound step looks short and the verdict leans to "starved" only when
            the host really waits for data).
        step: the step to stamp on the diagnosis.
        min_steps: the least number of steps judged.
        max_wait_share: the largest median share of waiting in a healthy run.
        min_wait_s: the least median wait, in seconds, that counts.

    Returns:
        A ``data-starvation`` diagnosis, or ``None``.
    """
    require_positive(min_steps=min_steps, max_wait_share=max_wait_share)
    pairs = [(float(w), float(s)) for w, s in zip(wait_times, step_times) if w >= 0 and s >= 0]
    if len(pairs) < min_steps:
        return None
    shares = [w / (w + s) if w + s > 0 else 0.0 for w, s in pairs]
    share = statistics.median(shares)
    wait = statistics.median(w for w, _ in pairs)
    compute = statistics.median(s for _, s in pairs)
    if share <= max_wait_share or wait <= min_wait_s:
        return None
    return new_diagnosis(
        "data-starvation",
        step,
        f"{share:.0%} of each step's wall time is spent waiting for the batch (median wait "
        f"{wait * 1000:.1f} ms, compute {compute * 1000:.1f} ms, over {len(pairs)} steps)",
        {
            "wait_share": share,
            "median_wait_s": wait,
            "median_step_s": compute,
            "steps": len(pairs),
            "max_wait_share": max_wait_share,
            "min_wait_s": min_wait_s,
            "statistic": share,
            "baseline": max_wait_share,
            "distance": share - max_wait_share,
        },
    )


# -- memory-swing -----------------------------------------------------------------------------
def detect_memory_swing(
    allocated_bytes: Sequence[float],
    *,
    step: int = 0,
    min_steps: int = 20,
    max_relative_swing: float = 0.25,
    min_swing_bytes: float = 256 * 2**20,
) -> Diagnosis | None:
    """On CUDA, allocated memory swings widely between steps.

    ``allocated_bytes[i]`` is ``torch.cuda.memory_allocated()`` read at the same point of each
    step (the monitor reads it at the end of the step: a host-side counter, no GPU sync). A
    steady run allocates the same at the same point of every step, up to a few buffers. Swings
    when, over at least ``min_steps`` readings, the median absolute step-to-step change exceeds
    ``max_relative_swing`` of the median reading *and* ``min_swing_bytes`` (the median ignores a
    one-off jump, such as the optimizer state appearing after the first step).

    Args:
        allocated_bytes: readings, one per step, after the warm-up.
        step: the step to stamp on the diagnosis.
        min_steps: the least number of readings judged.
        max_relative_swing: the largest median relative change in a healthy run.
        min_swing_bytes: the least median change, in bytes, that counts.

    Returns:
        A ``memory-swing`` diagnosis, or ``None``.
    """
    require_positive(min_steps=min_steps, max_relative_swing=max_relative_swing)
    values = finite_values(allocated_bytes)
    if len(values) < min_steps:
        return None
    median = statistics.median(values)
    changes = [abs(b - a) for a, b in itertools.pairwise(values)]
    swing = statistics.median(changes)
    relative = swing / median if median > 0 else 0.0
    if relative <= max_relative_swing or swing <= min_swing_bytes:
        return None
    return new_diagnosis(
        "memory-swing",
        step,
        f"allocated memory changes by {swing / 2**20:.0f} MiB ({relative:.0%} of its median "
        f"{median / 2**20:.0f} MiB) from one step to the next",
        {
            "median_swing_bytes": swing,
            "median_bytes": median,
            "relative_swing": relative,
            "min_bytes": min(values),
            "max_bytes": max(values),
            "steps": len(values),
            "max_relative_swing": max_relative_swing,
            "min_swing_bytes": min_swing_bytes,
            "statistic": swing,
            "baseline": median,
            "distance": relative,
        },
    )

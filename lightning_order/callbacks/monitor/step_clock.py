"""The monitor's step clock: host-clock marks at each train batch's start and end, turned into
per-batch waits (for the data) and step times at each check.

Per step the monitor only appends ``time.perf_counter()`` to :attr:`StepClock.marks` (twice);
everything here runs once per check or at epoch and validation boundaries.
"""

from __future__ import annotations

from collections import deque

__all__ = ["StepClock"]


class StepClock:
    """Bounded windows of the last ``window`` batches' waits and step times.

    A batch's wait runs from the previous batch's end (or the end of the check after it) to its
    start; ``-1`` marks an unknown wait (the first batch of an epoch pays for starting the
    loader; validation time is no wait for a training batch).

    Args:
        window: how many batches the windows keep.
    """

    def __init__(self, window: int) -> None:
        #: (start, end) clock readings of the batches since the last :meth:`read`, appended by the monitor.
        self.marks: list[float] = []
        self.waits: deque[float] = deque(maxlen=window)
        self.steps: deque[float] = deque(maxlen=window)
        self._last_end: float | None = None

    def read(self) -> None:
        """Turns the pending marks into waits and step times."""
        marks, last = self.marks, self._last_end
        pairs = len(marks) // 2
        if pairs:
            starts, ends = marks[0 : 2 * pairs : 2], marks[1 : 2 * pairs : 2]
            first = starts[0] - last if last is not None else -1.0
            self.waits.extend([first, *(s - e for s, e in zip(starts[1:], ends))])
            self.steps.extend([e - s for s, e in zip(starts, ends)])
            last = ends[-1]
            del marks[: 2 * pairs]
        self._last_end = last

    def pause(self) -> None:
        """Reads the pending marks; the next batch's wait is unknown (a new epoch, a validation)."""
        self.read()
        self._last_end = None

    def resume_at(self, now: float) -> None:
        """The next batch's wait starts ``now`` (after a check, whose time is no wait)."""
        self._last_end = now

    def known(self) -> tuple[list[float], list[float]]:
        """The waits and step times of the batches whose wait is known."""
        pairs = [(w, s) for w, s in zip(self.waits, self.steps) if w >= 0]
        return [w for w, _ in pairs], [s for _, s in pairs]

    def may_starve(self, min_wait_s: float) -> bool:
        """Whether the median known wait can exceed ``min_wait_s`` (a cheap gate, never a verdict).

        A median above it needs at least half of the known waits above it; in a healthy run
        (waits of microseconds) the ``max`` settles it.
        """
        if max(self.waits, default=0.0) <= min_wait_s:
            return False
        known = sum(1 for w in self.waits if w >= 0)
        return 2 * sum(1 for w in self.waits if w > min_wait_s) >= known

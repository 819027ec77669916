"""Rows served twice by the train loader's workers: a stream that forgets ``get_worker_info()``.

An ``IterableDataset`` runs its ``__iter__`` once in every loader worker. One that does not split
its shards by :func:`torch.utils.data.get_worker_info` (llama2.c's first ``PretokDataset``, many
hand-written streams) makes every worker read every row: with two workers every block is
trained on twice an epoch, and nothing fails.

The evidence (gathered by :mod:`lightning_order.callbacks.validator.content`): a hash of every row
of the first batches the real loader serves, with the worker that served it, and the hashes of as
many rows read from the same dataset in one process, without workers (the dataset's own repeat
rate: a corpus with real duplicate documents repeats rows there too). The judgement:

- **proven** (an error): at least :data:`~lightning_order.checks.estimates.MIN_HITS` rows served
  by one worker that another worker served too, and the Wilson interval of that share entirely
  above the interval of the dataset's own repeat rate;
- **suspected** (a warning with the evidence): rows served twice at a rate whose interval is
  entirely above the dataset's own, without that proof (too few, or from one worker);
- silent otherwise (a correct split, or repeats the dataset holds itself).

Pure functions of plain lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lightning_order.checks.estimates import MIN_HITS, RateEstimate
from lightning_order.rules import Violation

__all__ = ["ServedRows", "check_served_twice", "served_rows"]


@dataclass(frozen=True)
class ServedRows:
    """What the first batches of a loader with workers served, against the dataset's own reading.

    Attributes:
        rows: rows served (with workers) and hashed.
        repeats: of those, rows identical to a row served before.
        cross: of the repeats, rows whose earlier twin came from another worker.
        workers: the loader's ``num_workers``.
        own_rows: rows read without workers.
        own_repeats: of those, rows identical to a row read before.
    """

    rows: int
    repeats: int
    cross: int
    workers: int
    own_rows: int
    own_repeats: int

    @property
    def served(self) -> RateEstimate:
        """The share of served rows that repeat a row served before."""
        return RateEstimate(self.repeats, self.rows)

    @property
    def crossed(self) -> RateEstimate:
        """The share of served rows that another worker served before."""
        return RateEstimate(self.cross, self.rows)

    @property
    def own(self) -> RateEstimate:
        """The dataset's own repeat rate, read without workers."""
        return RateEstimate(self.own_repeats, self.own_rows)


def served_rows(served: Sequence[tuple[int, int]], own: Sequence[int], workers: int) -> ServedRows:
    """Counts the repeats of ``served`` (``(worker id, row hash)`` in serving order) and of ``own``.

    Args:
        served: every row the loader served in its first batches, with the worker that served it.
        own: the hashes of rows read from the same dataset without workers.
        workers: the loader's ``num_workers``.
    """
    first: dict[int, int] = {}  # row hash -> the worker that served it first
    repeats = cross = 0
    for worker, row in served:
        if row in first:
            repeats += 1
            cross += first[row] != worker
        else:
            first[row] = worker
    return ServedRows(len(served), repeats, cross, workers, len(own), len(own) - len(set(own)))


def check_served_twice(found: ServedRows) -> tuple[list[Violation], list[Violation]]:
    """``rows-served-twice``: ``(proven, suspected)``; the first stop a run, the second warn.

    Args:
        found: the counts (:func:`served_rows`).

    Returns:
        One proven violation (rows served by two workers at a rate the dataset's own reading does
        not show), or one suspected (rows served twice above the dataset's own rate, not proven),
        or nothing.
    """
    own_high = found.own.interval[1]
    details = {
        "rows": found.rows,
        "repeats": found.repeats,
        "cross_worker": found.cross,
        "workers": found.workers,
        "own_rows": found.own_rows,
        "own_repeats": found.own_repeats,
        "served": found.served.to_dict(),
        "own": found.own.to_dict(),
    }
    own = f"read without workers, the dataset repeats {found.own.describe('rows')}"
    if found.cross >= MIN_HITS and found.crossed.interval[0] > own_high:
        return [
            Violation(
                "rows-served-twice",
                ("shard",),
                f"the train loader's {found.workers} workers serve the same rows: of the first {found.rows} rows "
                f"served, {found.crossed.describe('rows')} had been served already by another worker; {own}. "
                "Each worker reads the whole stream, so every row is trained on once per worker each epoch",
                details={**details, "proven": True},
            )
        ], []
    if found.repeats and found.served.interval[0] > own_high:
        return [], [
            Violation(
                "rows-served-twice",
                ("shard",),
                f"the train loader ({found.workers} workers) serves rows twice within its first {found.rows} rows: "
                f"{found.served.describe('rows')}, {found.cross} of them from another worker; {own}. Not proven "
                f"(it takes {MIN_HITS} rows from two workers above the dataset's own rate): check that each worker "
                "reads its own share",
                details={**details, "proven": False},
            )
        ]
    return [], []

"""Do the data-parallel ranks read different samples? (``ranks-read-same-data``)

Input is one plain dict per rank (what the validator all-gathered at the start of training, when
the train loader Lightning will iterate exists and no batch is drawn), so every rank reaches the
same verdict. A summary may hold:

- ``rank`` (int) and ``data_parallel`` (:class:`lightning_order.parallelism.DataParallel` as a
  dict): ranks of one data-parallel rank form one tensor-parallel group, which reads the same
  batches by design; only one rank per group is compared (:func:`~.ranks.data_parallel_groups`);
- ``first``: hashes of the rows of this rank's first batches, in the order it will train on them;
- ``reads``: for a map-style loader, what its sampler will read this epoch: ``dataset`` (a hash
  of the dataset's length and some of its items: the indices only mean the same rows when it is
  the same dataset on every rank), ``space`` (how many indices the bitmap covers: the first
  ``space`` of the dataset), ``bitmap`` (``numpy.packbits`` of "index read", bytes) and
  ``repeats`` (indices this rank's sampler draws more than once: a sampler drawing with
  replacement, such as a weighted mixture's, shares indices across ranks by design, so its indices
  are not compared and identical first batches decide).

Two kinds of evidence, the stronger first. With the sampler's indices over one dataset, the share
of the dataset read by more than one data-parallel rank (the "repeated" share) and by none (the
"never read" share) are counted exactly; Lightning's ``DistributedSampler`` repeats at most
``size - 1`` indices to even the shares out, which passes. Without them (iterable loaders, a
dataset that differs per rank), identical first batches on two data-parallel ranks are the
evidence: row for row the same, which a correct split reads only when the data repeats itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightning_order.checks.ranks import data_parallel_groups
from lightning_order.rules import RULES, Violation

__all__ = ["check_rank_reads", "read_shares"]

#: The smallest repeated share reported (besides the sampler's own padding of ``size - 1`` indices).
MIN_REPEATED_SHARE = 0.01


def read_shares(bitmaps: Sequence[bytes], space: int) -> tuple[int, int]:
    """``(repeated, never)``: indices of ``range(space)`` read by more than one rank, and by none.

    Args:
        bitmaps: one ``numpy.packbits`` bitmap per data-parallel rank ("index read this epoch").
        space: how many indices the bitmaps cover.
    """
    counts = np.zeros(space, dtype=np.int32)
    for bitmap in bitmaps:
        counts += np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=space).astype(np.int32)
    return int((counts > 1).sum()), int((counts == 0).sum())


def _violation(message: str, details: dict[str, Any]) -> Violation:
    rule = RULES["ranks-read-same-data"]
    return Violation("ranks-read-same-data", ("shard",), message, rule.symptom, rule.fix, details)


def _from_indices(heads: Mapping[int, Mapping[str, Any]], size: int) -> list[Violation] | None:
    """The verdict from the samplers' indices, or ``None`` when they are not comparable."""
    reads = [s.get("reads") for s in heads.values()]
    if any(not r for r in reads) or len({(r["dataset"], r["space"]) for r in reads}) != 1:  # type: ignore[index]
        return None
    if any(int(r.get("repeats", 0)) > size - 1 for r in reads):  # type: ignore[union-attr]
        return None  # drawn with replacement: indices shared by ranks are expected (see ``reads``)
    space = int(reads[0]["space"])  # type: ignore[index]
    repeated, never = read_shares([r["bitmap"] for r in reads], space)  # type: ignore[index]
    if repeated <= size - 1 or repeated < MIN_REPEATED_SHARE * space:
        return []
    ranks = ", ".join(map(str, heads))
    return [
        _violation(
            f"data-parallel ranks (ranks {ranks}) read overlapping samples of the same train dataset this epoch: "
            f"{repeated / space:.1%} of it is read by more than one rank and {never / space:.1%} is never read "
            f"({repeated} and {never} of {space} indices, from the train loader's sampler): the sampler does not "
            "split the epoch by rank (a DistributedSampler seeded per rank, every rank reading all data, or "
            "use_distributed_sampler=False without a sampler of one's own)",
            {
                "evidence": "sampler",
                "repeated": repeated / space,
                "never_read": never / space,
                "indices": space,
            },
        )
    ]


def _from_batches(heads: Mapping[int, Mapping[str, Any]]) -> list[Violation]:
    """Identical first batches on two data-parallel ranks (the evidence without sampler indices)."""
    seen: dict[tuple[int, ...], int] = {}
    for rank, summary in heads.items():
        first = tuple(int(h) for h in summary.get("first") or ())
        if len(first) < 2 or len(set(first)) < 2:  # nothing read, or data that is one row repeated
            continue
        if first in seen:
            return [
                _violation(
                    f"data-parallel ranks {seen[first]} and {rank} draw identical first train batches ({len(first)} "
                    "rows, row for row the same): every rank reads the same stream, so 100% of what is trained "
                    "on is repeated on every rank (the share never read cannot be told from batches alone); an "
                    "iterable loader (nanoGPT's get_batch) seeded alike on every rank does this",
                    {"evidence": "batches", "repeated": 1.0, "never_read": None, "rows": len(first)},
                )
            ]
        seen[first] = rank
    return []


def check_rank_reads(summaries: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """``ranks-read-same-data``: data-parallel ranks read the same samples of the epoch.

    Args:
        summaries: one dict per rank (see the module docstring), in rank order.

    Returns:
        At most one violation, with the share repeated and (from sampler indices) never read.
    """
    groups = data_parallel_groups(summaries)
    if len(groups) < 2:  # one process, or one tensor-parallel group: nothing is split
        return []
    heads = {int(summaries[m[0]].get("rank", m[0])): summaries[m[0]] for m in groups.values()}
    found = _from_indices(heads, len(groups))
    return found if found is not None else _from_batches(heads)

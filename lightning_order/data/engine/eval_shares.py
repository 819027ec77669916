"""Evaluation splits cut by data-parallel rank: one contiguous share per rank, no sample read twice.

Lightning's own ``DistributedSampler`` pads the last shares with repeats so that every rank reads
as many samples; a metric then counts the repeats twice. Here data-parallel rank ``r`` of ``n``
reads the contiguous share ``[size * r // n, size * (r + 1) // n)``: shares differ by at most one
sample and together hold every sample once. Shares of unequal size are what makes a mean of rank
means drift from the 1-rank value; a metric reduced as a sum and a count
(:class:`~lightning_order.models.token_loss.TokenMeanLoss`) equals it exactly.

The size and rank are the data-parallel ones (:mod:`lightning_order.parallelism`, as the
``shard`` step decided them), so the ranks of one tensor-parallel group read the same share. A
split with fewer samples than ranks is read whole by every rank: each sample counted the same
number of times keeps a sum-and-count mean exact, and no rank is left without a batch (its peers
would wait for it in the metric's reduction).

The sampler is a :class:`~torch.utils.data.DistributedSampler`, so Lightning leaves it alone
instead of putting its padding sampler in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, Dataset, DistributedSampler

__all__ = ["ShareSampler", "eval_share", "make_share_loader"]


def eval_share(size: int, parts: int, part: int) -> range:
    """The indices data-parallel rank ``part`` of ``parts`` reads of a split of ``size`` samples.

    Args:
        size: samples in the whole split.
        parts: data-parallel ranks.
        part: this rank, in ``[0, parts)``.

    Returns:
        A contiguous range; ``range(size)`` when ``size < parts`` (every rank reads the whole split).

    Raises:
        ValueError: ``parts < 1`` or ``part`` outside ``[0, parts)``.
    """
    if parts < 1 or not 0 <= part < parts:
        raise ValueError(f"expected 0 <= part < parts, got part={part}, parts={parts}")
    if size < parts:
        return range(size)
    return range(size * part // parts, size * (part + 1) // parts)


class ShareSampler(DistributedSampler):
    """Yields :func:`eval_share` of its dataset, in order: no shuffling, no padding.

    Args:
        dataset: the whole split (every rank holds it; this sampler picks the rank's share).
        num_replicas: data-parallel ranks.
        rank: this data-parallel rank.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        self.share = eval_share(len(dataset), num_replicas, rank)  # type: ignore[arg-type]
        self.num_samples = len(self.share)

    def __iter__(self) -> Iterator[int]:
        return iter(self.share)

    def __len__(self) -> int:
        return len(self.share)


def make_share_loader(
    data: Dataset | None,
    batch_size: int,
    num_workers: int,
    collate: Callable[[Any], Any],
    parts: int,
    part: int,
) -> DataLoader:
    """A loader over data-parallel rank ``part``'s share of ``data`` (the whole split, held by every rank).

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    if data is None:
        raise RuntimeError("call setup() before asking for a dataloader (Lightning does it for you)")
    return DataLoader(
        data,
        batch_size=batch_size,
        sampler=ShareSampler(data, parts, part),
        num_workers=num_workers,
        collate_fn=collate,
        persistent_workers=num_workers > 0,
    )

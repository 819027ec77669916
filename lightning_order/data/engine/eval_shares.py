"""Evaluation splits cut by data-parallel rank: one contiguous share per rank, no sample scored twice.

Lightning's own ``DistributedSampler`` pads the last shares with repeats so that every rank reads
as many samples; a metric then counts the repeats twice. Here data-parallel rank ``r`` of ``n``
reads the contiguous share ``[size * r // n, size * (r + 1) // n)``: shares differ by at most one
sample and together hold every sample once. A mean of rank means drifts from the 1-rank value on
such shares; a metric reduced as a sum and a count
(:class:`~lightning_order.models.token_loss.TokenMeanLoss`) equals it exactly.

Every rank must still run as many evaluation steps: a sharded model (FSDP2 under
``ModelParallelStrategy``) gathers its parameters in every forward, a collective that a rank with
one batch fewer never joins, and the run hangs. With ``pad=True`` a shorter share ends with the
padding index, the dataset's length (one past its end), which the dataset serves as a sample with
no target (``OrderedLMDataModule``'s blocks: every label ``-100``, ignored by the loss): every rank
reads ``ceil(size / n)`` samples, and the padding adds nothing to a sum and a count.

The size and rank are the data-parallel ones (:mod:`lightning_order.parallelism`, as the
``shard`` step decided them), so the ranks of one tensor-parallel group read the same share. A
split with fewer samples than ranks is read whole by every rank: each sample counted the same
number of times keeps a sum-and-count mean exact.

The sampler is a :class:`~torch.utils.data.DistributedSampler`, so Lightning leaves it alone
instead of putting its repeating sampler in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset, DistributedSampler

from lightning_order.data.engine.loaders import sampled_loader, set_up

__all__ = ["ShareSampler", "eval_share", "make_share_loader", "padded_share"]


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


def padded_share(size: int, parts: int, part: int) -> list[int]:
    """:func:`eval_share`, ended with the padding index ``size`` to the longest share's length (``ceil(size / parts)``)."""
    share = eval_share(size, parts, part)
    longest = len(eval_share(size, parts, parts - 1))  # the last share is never the shorter one
    return [*share, *[size] * (longest - len(share))]


class ShareSampler(DistributedSampler):
    """Yields this rank's share of its dataset, in order, without shuffling or repeats.

    Args:
        dataset: the whole split (every rank holds it; this sampler picks the rank's share).
        num_replicas: data-parallel ranks.
        rank: this data-parallel rank.
        pad: end a shorter share with the padding index (``len(dataset)``) so every rank reads as
            many samples (:func:`padded_share`); only for a dataset that serves that index as a
            sample with no target.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, pad: bool = False) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        size = len(dataset)  # type: ignore[arg-type]
        share = padded_share if pad else eval_share
        self.share: Sequence[int] = share(size, num_replicas, rank)
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
    pad: bool = False,
) -> DataLoader:
    """A loader over data-parallel rank ``part``'s share of ``data`` (the whole split, held by every rank).

    ``pad``: every rank reads as many samples (:class:`ShareSampler`).

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    data = set_up(data)
    return sampled_loader(data, ShareSampler(data, parts, part, pad), batch_size, num_workers, collate)

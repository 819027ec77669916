"""The dataloaders: a resumable train loader in the global order, and plain ones for evaluation.

**Train** (:func:`make_train_loader`): a :class:`ResumableLoader` over the *whole* train split,
with a :class:`GlobalOrderSampler` that yields this rank's part of every global batch of the
epoch's global order (:mod:`lightning_order.positions`). The loader counts the batches its
iterator handed to the training loop (not what workers prefetched) and offers the position as
``state_dict``/``load_state_dict``, which is Lightning's stateful-loader protocol: Lightning saves
the state in every checkpoint (``loops.fit_loop.state_dict.combined_loader``) and restores it
before the first resumed batch, so a resumed run continues at the sample it stopped at, with any
``num_workers``, on any number of ranks with the same global batch.

Why not torchdata's ``StatefulDataLoader``: it works here, but its state is an opaque snapshot of
every worker (which the validator would have to parse to prove a position), it snapshots worker
state every step by default, and it warns on current torch. The position of a global order is two
integers, so counting the batches the loop received is all a loader has to do.

The sampler is a :class:`~torch.utils.data.DistributedSampler` so that Lightning, seeing one,
leaves it alone instead of wrapping it in a sampler of its own; ``set_epoch`` (called by
Lightning before every epoch) selects the epoch's order. A restored position is ours, whatever
Lightning's epoch counter says: a checkpoint saved after ``fit()`` returned at ``max_steps`` ends
Lightning's epoch although the data's epoch goes on. Where the first pass after a restore reads
is settled when it starts, from Lightning's batch count for it (the DataModule hands the loader
``progress``): a count carried over continues the checkpoint's epoch for the batches Lightning has
left of it, a count of 0 starts the data's next epoch, and Lightning's later epochs read the
data's epochs that follow, in order (:meth:`GlobalOrderSampler.placement`).
The underlying iterator starts at the first batch asked for, after ``set_epoch``, so workers
never prefetch from a stale position.

**Evaluation** (:func:`make_loader`): a one-replica seeded sampler over data that every rank
holds whole (the validation split is the same on every rank; ``OrderedLMDataModule`` reads one
share of it per data-parallel rank instead: :mod:`~lightning_order.data.engine.eval_shares`). Each pipeline brings its own
collate function (:mod:`lightning_order.data.text.batches`, :mod:`lightning_order.data.lm.datamodule`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, Dataset, DistributedSampler

from lightning_order.positions import GlobalOrder, TrainPosition

__all__ = [
    "GlobalOrderSampler",
    "ResumableLoader",
    "make_loader",
    "make_train_loader",
    "sampled_loader",
    "set_up",
]


#: Lightning's ``(batches done in the epoch its loop is in or starting, batches per epoch or None)``.
Progress = Callable[[], "tuple[int, int | None] | None"]


class GlobalOrderSampler(DistributedSampler):
    """This rank's samples of every global batch of an epoch's global order, from a position on.

    Args:
        dataset: the whole train split (its length is ``order.size``).
        order: the global order rule for this rank.

    Attributes:
        epoch: the data epoch whose order the next iteration reads (Lightning's ``set_epoch``
            plus the offset a restore found).
        start: the global position of ``epoch`` the next iteration starts at (0 unless restored).
        began: ``(epoch, start)`` of the latest iteration.
        restored: a position was restored (:meth:`restore`) and no iteration has started since.

    A restored position is the data's, whatever Lightning's epoch counter says (docs/architecture.md, "The train order and the position").
    """

    def __init__(self, dataset: Dataset, order: GlobalOrder) -> None:
        super().__init__(
            dataset,
            num_replicas=order.world_size,
            rank=order.rank,
            shuffle=order.shuffle,
            seed=order.seed,
            drop_last=True,
        )
        self.order = order
        self.start = 0
        self.began = (0, 0)
        self.restored = False
        self._saved = (0, 0)  # the checkpoint's own (epoch, samples) while restored
        self._lightning: int | None = None  # Lightning's epoch, as its latest set_epoch said
        self._offset = 0  # the data's epoch minus Lightning's (non-zero after a restore across them)
        self._limit: int | None = None  # global batches the next pass may serve (a continued epoch's rest)
        self._digest: tuple[int, str] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Reads the order of Lightning's epoch ``epoch`` (plus the offset a restore found) next.

        After a restore the first pass is placed when it starts (:meth:`settle`), once Lightning's
        count for it is known: Lightning's epoch counter may have moved on (``fit()`` returned at
        ``max_steps``) while the data's epoch goes on.
        """
        self._lightning = int(epoch)
        if not self.restored and int(epoch) + self._offset != self.epoch:
            self.epoch, self.start = int(epoch) + self._offset, 0

    def restore(self, position: TrainPosition) -> None:
        """Continues at a saved position (its next sample: the next epoch's head once it is done)."""
        epoch, start = position.next_sample()
        self.epoch, self.start, self.restored = epoch, start if start < self.order.size else 0, True
        self._saved, self._lightning, self._limit = (position.epoch, position.samples), None, None

    def placement(self, progress: tuple[int, int | None] | None) -> tuple[int, int, int | None]:
        """Where the first pass after a restore reads: ``(epoch, start, most global batches)``.

        ``progress``: Lightning's ``(batches done, batches per epoch)`` for the epoch it starts.
        A count carried over means Lightning continues the checkpoint's epoch (a mid-epoch resume,
        or a checkpoint saved after ``fit()`` returned, whatever its epoch counter says): so does
        the data, for the batches Lightning has left of it (none: an empty pass). A count of 0 is a
        new epoch: the data's next one. Unknown (no Lightning): Lightning's epoch wins when it differs.
        """
        epoch, samples = self._saved
        if progress is None:
            if self._lightning is None or self._lightning == self.epoch:
                return self.epoch, self.start, None
            return self._lightning, 0, None
        done, total = progress
        if done:
            return epoch, samples, None if total is None else max(0, int(total) - int(done))
        return (epoch, 0, None) if samples == 0 else (epoch + 1, 0, None)

    def next_read(self, progress: tuple[int, int | None] | None) -> tuple[int, int]:
        """``(epoch, samples)`` of the next sample the loader will serve (what a restore reports)."""
        if not self.restored:
            return self.epoch, self.start
        epoch, start, limit = self.placement(progress)
        if limit == 0 or start >= self.order.epoch_samples:  # an empty pass: the next epoch's head
            return epoch + 1, 0
        return epoch, start

    def settle(self, progress: tuple[int, int | None] | None) -> None:
        """Places the first pass after a restore (:meth:`placement`) and maps Lightning's epochs onto the data's."""
        if not self.restored:
            return
        self.epoch, self.start, self._limit = self.placement(progress)
        if self._lightning is not None:
            self._offset = self.epoch - self._lightning

    def digest(self, epoch: int) -> str:
        """:meth:`GlobalOrder.digest` of ``epoch`` (computed once per epoch)."""
        if self._digest is None or self._digest[0] != epoch:
            self._digest = (epoch, self.order.digest(epoch))
        return self._digest[1]

    def __iter__(self) -> Iterator[int]:
        epoch, start, limit = self.epoch, self.start, self._limit
        batches = self.order.rank_batches(epoch, start)
        batches = batches if limit is None else min(batches, limit)
        # A second pass over the epoch starts at its head; an empty one leaves the position as it was.
        self.began, self.start = (epoch, start), start if batches == 0 else 0
        self.restored, self._limit = False, None
        # computed a chunk at a time as the loader reads: a rank never holds its epoch's indices
        return (int(i) for chunk in self.order.rank_chunks(epoch, start, batches) for i in chunk.tolist())

    def __len__(self) -> int:
        # The whole epoch's, also when resumed mid-epoch: Lightning counts the restored batches.
        return self.order.length


class ResumableLoader(DataLoader):
    """A :class:`~torch.utils.data.DataLoader` whose position Lightning saves and restores.

    Takes :class:`~torch.utils.data.DataLoader`'s arguments; with a :class:`GlobalOrderSampler` it
    counts the batches its iterator handed out and reports the position through
    :meth:`state_dict` (any other sampler: no position, an empty state).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._began: tuple[int, int] | None = None  # (epoch, start) of the running iteration
        self._yielded = 0
        #: Lightning's count for the epoch it is in (set by the DataModule): where a restored
        #: position continues depends on whether Lightning continues the checkpoint's epoch.
        self.progress: Progress | None = None

    def __iter__(self) -> Iterator[Any]:
        self._began, self._yielded = None, 0
        return _CountingIterator(self)

    def _lightning(self) -> tuple[int, int | None] | None:
        return self.progress() if self.progress is not None else None

    def _iterate(self) -> Iterator[Any]:
        if isinstance(self.sampler, GlobalOrderSampler):  # Lightning's count is final now
            self.sampler.settle(self._lightning())
        return super().__iter__()

    def _count(self) -> None:
        if self._began is None:
            self._began = getattr(self.sampler, "began", (0, 0))
        self._yielded += 1

    @property
    def restored(self) -> bool:
        """Whether a saved position was loaded and the loader has not started reading since."""
        return bool(getattr(self.sampler, "restored", False))

    def position(self) -> TrainPosition | None:
        """Where the loop stands: the epoch and the global samples of it already handed out."""
        sampler = self.sampler
        if not isinstance(sampler, GlobalOrderSampler):
            return None
        if self._began is None:  # no batch yet: the next iteration's start
            epoch, samples = sampler.next_read(self._lightning())
        else:
            epoch, samples = self._began[0], self._began[1] + self._yielded * sampler.order.global_batch
        return TrainPosition.of(sampler.order, epoch, samples, sampler.digest(epoch))

    def state_dict(self) -> dict[str, Any]:
        """The position as plain data (Lightning stores it in the checkpoint)."""
        position = self.position()
        return position.to_dict() if position is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continues at the saved global position (the next epoch's start when that epoch was done).

        Positions are global samples, so a state saved on another number of ranks or with another
        batch size continues at the same sample. A state this loader cannot read is ignored (the
        run starts the epoch afresh; ``OrderValidator`` reports what that replays).

        Raises:
            CheckpointError: a position of ours with a damaged field (``epoch=-1``, ``samples``
                a string, ...), named with its value.
        """
        position = TrainPosition.from_dict(state_dict)
        sampler = self.sampler
        if position is None or not isinstance(sampler, GlobalOrderSampler):
            return
        sampler.restore(position)
        self._began, self._yielded = None, 0


class _CountingIterator(Iterator[Any]):
    """The loader's iterator, started at the first batch asked for; counts what it hands out."""

    def __init__(self, loader: ResumableLoader) -> None:
        self._loader = loader
        self._inner: Iterator[Any] | None = None

    def __next__(self) -> Any:
        if self._inner is None:
            self._inner = self._loader._iterate()
        batch = next(self._inner)
        self._loader._count()
        return batch

    def __len__(self) -> int:
        return len(self._loader)


def make_train_loader(
    data: Dataset | None,
    order: GlobalOrder,
    num_workers: int,
    collate: Callable[[Any], Any],
) -> ResumableLoader:
    """A resumable loader over the whole train split ``data``, reading this rank's part of ``order``.

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    data = set_up(data)
    return ResumableLoader(
        data,
        batch_size=order.batch_size,
        sampler=GlobalOrderSampler(data, order),
        num_workers=num_workers,
        collate_fn=collate,
        persistent_workers=num_workers > 0,
    )


def make_loader(
    data: Dataset | None,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_workers: int,
    collate: Callable[[Any], Any],
) -> DataLoader:
    """A loader over ``data`` (whole on every rank) with a seeded one-replica sampler.

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    data = set_up(data)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
    return sampled_loader(data, sampler, batch_size, num_workers, collate)


def set_up(data: Dataset | None) -> Dataset:
    """``data``, set up; a loader asked for before ``setup`` ran is one clear error.

    Raises:
        RuntimeError: ``data`` is ``None`` (``setup`` has not run).
    """
    if data is None:
        raise RuntimeError("call setup() before asking for a dataloader (Lightning does it for you)")
    return data


def sampled_loader(
    data: Dataset, sampler: Any, batch_size: int, num_workers: int, collate: Callable[[Any], Any]
) -> DataLoader:
    """The evaluation loaders' one shape: ``data`` read through ``sampler``, workers kept between epochs."""
    return DataLoader(
        data,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        persistent_workers=num_workers > 0,
    )

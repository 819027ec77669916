"""The data position: the global order of train samples, and where a run stands in it (docs/architecture.md, "The train order and the position").

One rule, shared by the ``shard`` steps, the resumable loader, the resume check and recovery:

* the order of an epoch is a permutation of the *whole* train split, a function of the seed and
  the epoch only (the identity without shuffling), the same whatever the number of ranks; the
  sample at a position is computed where it is asked (:mod:`lightning_order.permutation`), so no
  rank ever holds the permutation;
* the epoch is cut into *global batches* of ``world_size × batch_size`` samples; rank ``r`` reads
  samples ``[r·B, (r+1)·B)`` of each, so the ranks' batches laid side by side in rank order are the
  global batch, and every rank reads the same count. "Ranks" are data-parallel ranks
  (:mod:`lightning_order.parallelism`): with a device mesh, the ranks of one tensor-parallel
  group hold one rank ``r`` here and read the same samples;
* what does not fill a global batch at the end of the epoch is not served that epoch (with
  shuffling, other samples each epoch), and is recorded as ``dropped``;
* the position is ``(epoch, samples)``: global samples of the epoch consumed. It does not name the
  world size, so a run resumed on another number of ranks with the same global batch continues at
  the same sample; with another global batch it continues there too, cut into batches of the new
  size (see :func:`remaining_positions`).

Plain numpy and plain data: no torch, no Lightning, so the pure checks use it too. The trade-off:
a seeded bijection evaluated per position (a few dozen integer operations a sample) instead of a
per-rank shard fixed once or a permutation materialised each epoch (8 bytes a sample on every
rank); that is what makes the order independent of the world size at O(1) memory a rank.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import xxhash

from lightning_order.errors import CheckpointError, DataError
from lightning_order.permutation import permutation_key, permute

__all__ = [
    "ORDER_ALGORITHM",
    "POSITION_FORMAT",
    "GlobalOrder",
    "TrainPosition",
    "check_position",
    "epoch_order",
    "epoch_positions",
    "order_digest",
    "remaining_positions",
]

#: The ``format`` of a position's plain-data form (what checkpoints hold).
POSITION_FORMAT = "lightning_order.position"
#: Names the algorithm of the shuffled order in its digest (another algorithm: another digest).
ORDER_ALGORITHM = "feistel-6-cycle-walk"
#: Positions an order's digest samples (spread over the epoch).
_DIGEST_SAMPLES = 64
#: Global positions computed at once while a rank reads an epoch (bounds what a sampler holds).
_CHUNK_POSITIONS = 1 << 13

# The counts a position may hold, the least each may be, and what each means (for the message).
_COUNTS: dict[str, tuple[int, str]] = {
    "epoch": (0, "the epoch the run stood in"),
    "samples": (0, "global samples of the epoch consumed"),
    "epoch_samples": (0, "global samples the epoch serves"),
    "dataset_size": (0, "samples in the train split"),
    "batches": (0, "Lightning's batches of the epoch done"),
    "epoch_batches": (0, "Lightning's batches per epoch"),
    "global_batch": (1, "samples per step over all ranks"),
    "batch_size": (1, "samples per rank and batch"),
    "world_size": (1, "ranks"),
}


def _whole(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _bad_field(data: Mapping[str, Any], ours: bool) -> tuple[str, Any, str] | None:
    """The first field of ``data`` that no run could have saved: ``(field, value, what was expected)``."""
    for name, (least, meaning) in _COUNTS.items():
        unknown = not ours or name in ("batches", "epoch_batches")  # counts that may be unknown (None)
        if name not in data or (data[name] is None and unknown):
            continue
        value = data[name]
        if not _whole(value) or value < least:
            return name, value, f"a whole number >= {least} ({meaning})"
    if "seed" in data and not (_whole(data["seed"]) or (data["seed"] is None and not ours)):
        return "seed", data["seed"], "a whole number (the shuffle's seed)"
    if "shuffle" in data and not isinstance(data["shuffle"], bool):
        return "shuffle", data["shuffle"], "true or false"
    return None


def check_position(data: Mapping[str, Any]) -> None:
    """Refuses a saved position no run could have written (an edited or damaged checkpoint).

    A position of ours (``format`` = :data:`POSITION_FORMAT`) must hold every count as a whole
    number; another loader's (Lightning's batch count) may leave a count unknown (``None``).
    Negative counts are refused too: numpy would read a negative sample index from the epoch's end.

    Raises:
        CheckpointError: naming the field, its value, what was expected and what to do.
    """
    if not isinstance(data, Mapping):
        raise CheckpointError(
            f"the checkpoint's data position is not a mapping (got {type(data).__name__}): the checkpoint is "
            "damaged or was written by something else; resume from an intact checkpoint of this run"
        )
    bad = _bad_field(data, ours=data.get("format") == POSITION_FORMAT)
    if bad is None:
        return
    name, value, expected = bad
    raise CheckpointError(
        f"the checkpoint's data position has {name}={value!r}, expected {expected}: the checkpoint was edited "
        "or damaged, and no run reads from such a position. Resume from an intact checkpoint of this run; or "
        "keep only its weights (torch.load(path, weights_only=True)['state_dict'] into the model) and fit "
        "without ckpt_path, which starts the data at the head of an epoch"
    )


def epoch_positions(
    size: int, seed: int, epoch: int, positions: np.ndarray, shuffle: bool = True
) -> np.ndarray:
    """The samples at ``positions`` of epoch ``epoch``'s global order (int64): O(len(positions)) memory.

    A seeded bijection of ``range(size)`` keyed by ``(seed, epoch)``
    (:func:`~lightning_order.permutation.permute`); the identity when ``shuffle`` is off.
    """
    at = np.asarray(positions, dtype=np.int64)
    ordered: np.ndarray = at.copy() if not shuffle else permute(at, int(size), permutation_key(seed, epoch))
    return ordered


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The global order of epoch ``epoch``: a permutation of ``range(size)`` (int64), a function of ``(seed, epoch)``.

    The whole of it (8 bytes a sample): for checks and tests; a loader reads :func:`epoch_positions`.
    """
    return epoch_positions(size, seed, epoch, np.arange(size, dtype=np.int64), shuffle)


def order_digest(size: int, seed: int, epoch: int, shuffle: bool = True) -> str:
    """A short hash that names an epoch's order: its algorithm, size, seed, epoch, shuffle and samples at spread positions.

    O(1) in ``size``: a changed seed, shuffle, size or algorithm shows in it.
    """
    spread = np.unique(np.linspace(0, max(0, size - 1), num=min(size, _DIGEST_SAMPLES), dtype=np.int64))
    sampled = epoch_positions(size, seed, epoch, spread, shuffle) if size else spread
    head = f"{ORDER_ALGORITHM}:{int(size)}:{int(seed)}:{int(epoch)}:{bool(shuffle)}:".encode()
    return xxhash.xxh3_64_hexdigest(head + sampled.tobytes())


def remaining_positions(size: int, global_batch: int, start: int) -> int:
    """How many global samples an epoch serves from position ``start`` on: whole global batches only."""
    return max(0, (size - start) // global_batch) * global_batch


@dataclass(frozen=True)
class GlobalOrder:
    """The global order rule of one train split for one rank (see the module docstring).

    Attributes:
        size: samples in the train split.
        batch_size: samples per rank and batch.
        world_size: data-parallel ranks (the world size under DDP).
        rank: this data-parallel rank.
        seed: the shuffle's seed.
        shuffle: shuffle every epoch (else the split's own order, every epoch).
    """

    size: int
    batch_size: int
    world_size: int = 1
    rank: int = 0
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got rank={self.rank}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all ranks: ``world_size × batch_size``."""
        return self.world_size * self.batch_size

    @property
    def epoch_batches(self) -> int:
        """Global batches per epoch (the same count on every rank)."""
        return self.size // self.global_batch

    @property
    def epoch_samples(self) -> int:
        """Global samples served per epoch: whole global batches only."""
        return self.epoch_batches * self.global_batch

    @property
    def dropped(self) -> int:
        """Samples per epoch that do not fill a global batch (not served that epoch)."""
        return self.size - self.epoch_samples

    @property
    def length(self) -> int:
        """Samples this rank reads per epoch."""
        return self.epoch_batches * self.batch_size

    def require_one_batch(self, what: str, step: str = "shard") -> None:
        """Raises :class:`DataError` when the split cannot fill one global batch (``what``: e.g. "rows").

        Raises:
            DataError: fewer samples than ``world_size × batch_size``.
        """
        if self.epoch_batches == 0:
            raise DataError(
                f"the train split has {self.size} {what}, fewer than one global batch of {self.global_batch} "
                f"({self.world_size} ranks × batch_size {self.batch_size}): every rank needs a batch each step; "
                "lower batch_size, use more data, or fewer devices",
                step=step,
            )

    def order_at(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The samples at global ``positions`` of ``epoch``'s order (:func:`epoch_positions`)."""
        return epoch_positions(self.size, self.seed, epoch, positions, self.shuffle)

    def rank_batches(self, epoch: int, start: int = 0) -> int:
        """Global batches of ``epoch`` left from global position ``start`` on (this rank reads one part of each)."""
        return remaining_positions(self.size, self.global_batch, start) // self.global_batch

    def _rank_positions(self, start: int, first: int, stop: int) -> np.ndarray:
        """This rank's global positions in global batches ``[first, stop)`` counted from ``start``."""
        return (
            start
            + self.rank * self.batch_size
            + np.arange(first, stop, dtype=np.int64)[:, None] * self.global_batch
            + np.arange(self.batch_size, dtype=np.int64)[None, :]
        ).ravel()

    def rank_indices(self, epoch: int, start: int = 0) -> np.ndarray:
        """The samples this rank reads in ``epoch`` from global position ``start`` on, in reading order.

        The whole of them (8 bytes a sample); a loader reads :meth:`rank_chunks`.
        """
        return self.order_at(epoch, self._rank_positions(start, 0, self.rank_batches(epoch, start)))

    def rank_chunks(self, epoch: int, start: int = 0, batches: int | None = None) -> Iterator[np.ndarray]:
        """:meth:`rank_indices` made a chunk at a time (what a rank holds is one chunk, whatever the split's size).

        Args:
            epoch: the epoch.
            start: the global position to start at.
            batches: the most global batches to read (``None``: the rest of the epoch).
        """
        total = self.rank_batches(epoch, start)
        total = total if batches is None else min(total, int(batches))
        step = max(1, _CHUNK_POSITIONS // self.batch_size)
        for first in range(0, total, step):
            yield self.order_at(epoch, self._rank_positions(start, first, min(total, first + step)))

    def digest(self, epoch: int) -> str:
        """A short hash that names the epoch's order (:func:`order_digest`): a changed seed, shuffle or algorithm shows in it."""
        return order_digest(self.size, self.seed, epoch, self.shuffle)


@dataclass(frozen=True)
class TrainPosition:
    """Where a run stands in the global order, as plain data (what a checkpoint holds).

    Attributes:
        epoch: the epoch.
        samples: global samples of ``epoch`` consumed (``epoch_samples`` once the epoch is done).
        epoch_samples: global samples the epoch serves at ``global_batch``.
        global_batch: ``world_size × batch_size`` when the position was taken.
        batch_size: samples per rank and batch.
        world_size: data-parallel ranks.
        dataset_size: samples in the train split.
        seed: the shuffle's seed.
        shuffle: whether the order is shuffled.
        order: :meth:`GlobalOrder.digest` of the epoch's order.
    """

    epoch: int
    samples: int
    epoch_samples: int
    global_batch: int
    batch_size: int
    world_size: int
    dataset_size: int
    seed: int
    shuffle: bool
    order: str = ""

    @classmethod
    def of(cls, order: GlobalOrder, epoch: int, samples: int, digest: str = "") -> TrainPosition:
        """The position ``(epoch, samples)`` in ``order``."""
        return cls(
            int(epoch),
            int(samples),
            order.epoch_samples,
            order.global_batch,
            order.batch_size,
            order.world_size,
            order.size,
            order.seed,
            order.shuffle,
            digest,
        )

    @staticmethod
    def order_digest(size: int, seed: int, epoch: int, shuffle: bool = True) -> str:
        """The digest an order of ``(size, seed, epoch, shuffle)`` has today (:func:`order_digest`), to compare with :attr:`order`."""
        return order_digest(size, seed, epoch, shuffle)

    @property
    def done(self) -> bool:
        """Whether the epoch has no whole global batch left at this global batch."""
        return remaining_positions(self.dataset_size, self.global_batch, self.samples) == 0

    def next_sample(self) -> tuple[int, int]:
        """``(epoch, samples)`` of the next sample served: the next epoch's start once this one is done."""
        return (self.epoch + 1, 0) if self.done else (self.epoch, self.samples)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (ints, strings, a bool), loadable with ``weights_only=True``."""
        return {"format": POSITION_FORMAT, "version": 1, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainPosition | None:
        """The position :meth:`to_dict` wrote; ``None`` for anything else (another loader's state).

        Raises:
            CheckpointError: a position of ours with a field no run could have saved (:func:`check_position`).
        """
        if not isinstance(data, Mapping) or data.get("format") != POSITION_FORMAT:
            return None
        check_position(data)
        names = [f.name for f in fields(cls)]
        try:
            return cls(**{name: data[name] for name in names if name in data})
        except TypeError:  # a field missing: not a position this version can read
            return None

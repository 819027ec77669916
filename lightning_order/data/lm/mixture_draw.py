"""A mixture's epoch draw computed per slot: which source, and which of its blocks, a slot serves.

An epoch of a mixture is ``total = sum(counts)`` *slots*; source ``i`` owns ``counts[i]`` of them.
Two bijections, both evaluated where they are asked, so nothing of size ``total`` is ever built
(a materialised draw costs 8 bytes a drawn block on every rank, rebuilt each epoch):

* **the interleave** (:func:`interleave`): slot ``q`` belongs to source 0 when Bresenham's line of
  slope ``counts[0] / total`` steps at ``q`` (``⌊(q+1)·c/n⌋ > ⌊q·c/n⌋``), its rank among source 0's
  slots being ``⌊q·c/n⌋``; the other slots, renumbered, are shared the same way among the
  remaining sources. So every prefix of the slots holds each source within a few slots of its
  weight, and slot -> (source, rank) is O(sources) integer operations a slot;
* **the source's draw** (:func:`source_blocks`): source ``i`` of ``size`` blocks drawing
  ``count = passes·size + extra`` of them serves every block ``passes`` times (a seeded
  permutation of its blocks per epoch, read ``passes`` times) and ``extra`` blocks once more: a
  window of a seeded permutation that moves on by ``extra`` each epoch and wraps around, a fresh
  permutation every ``⌈size / extra⌉`` epochs. So within an epoch each block is drawn
  ``⌊count/size⌋`` or ``⌈count/size⌉`` times, and a downsampled source (``passes = 0``) serves
  every one of its blocks in each cycle of ``⌈size / count⌉`` epochs, each epoch where the last
  stopped.

The permutations are :func:`~lightning_order.permutation.permute`'s, keyed by the seed, the
salt :data:`MIXTURE_SEED`, the source and the epoch (or the window's cycle). The trade-off: the
interleave of an unshuffled epoch is regular (Bresenham's) rather than random, and the window's
permutation is kept for ``⌈size / extra⌉`` epochs (what makes the coverage exact).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lightning_order.permutation import permutation_key, permute

__all__ = ["MIXTURE_ALGORITHM", "MIXTURE_SEED", "drawn_rows", "interleave", "source_blocks"]

#: Salts the seed of the draw, so it never repeats the shuffle's own permutation.
MIXTURE_SEED = 0x3D1C
#: Names the draw's algorithm in a mixed order's digest (another algorithm: another digest).
MIXTURE_ALGORITHM = "bresenham-interleave:feistel-passes-and-windows"
#: The largest ``n`` whose products ``a·c`` (``a, c <= n``) fit in int64; beyond it, exact Python ints.
_INT64_PRODUCTS = 3_037_000_499


def _muldiv(a: np.ndarray, c: int, n: int) -> np.ndarray:
    """``⌊a·c/n⌋`` exactly, for ``0 <= a, c <= n`` (Python integers past :data:`_INT64_PRODUCTS`)."""
    if n <= _INT64_PRODUCTS:
        out: np.ndarray = a * np.int64(c) // np.int64(n)
        return out
    # beyond ~3·10⁹ drawn blocks the products overflow int64: exact, slower, still a batch at a time
    return np.fromiter((int(x) * c // n for x in a.tolist()), dtype=np.int64, count=a.size)


def interleave(slots: np.ndarray, counts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(source, rank)`` of each of ``slots`` (int64 arrays): the source a slot belongs to and its rank among them.

    A bijection of ``[0, sum(counts))`` onto ``{(i, k): 0 <= k < counts[i]}``; memory is that of
    ``slots`` (a batch), whatever the counts.

    Raises:
        IndexError: a slot outside ``[0, sum(counts))``.
    """
    left = np.asarray(slots, dtype=np.int64).reshape(-1).copy()
    total = int(sum(int(c) for c in counts))
    if left.size and (left.min() < 0 or left.max() >= total):
        raise IndexError(f"a slot is outside [0, {total})")
    source = np.full(left.size, -1, dtype=np.int64)
    rank = np.zeros(left.size, dtype=np.int64)
    open_ = np.arange(left.size)  # the slots not yet given a source
    remaining = total
    for i, count in enumerate(int(c) for c in counts):
        if not open_.size:
            break
        if count == 0:
            continue
        q = left[open_]
        before, upto = _muldiv(q, count, remaining), _muldiv(q + 1, count, remaining)
        mine = upto > before  # Bresenham's line steps here: the slot is source i's
        source[open_[mine]], rank[open_[mine]] = i, before[mine]
        left[open_[~mine]] = q[~mine] - before[~mine]  # its place among the other sources' slots
        open_, remaining = open_[~mine], remaining - count
    return source.reshape(np.shape(slots)), rank.reshape(np.shape(slots))


def source_blocks(ranks: np.ndarray, size: int, count: int, seed: int, source: int, epoch: int) -> np.ndarray:
    """The blocks (in ``range(size)``) that draws ``ranks`` of source ``source``'s epoch ``epoch`` serve.

    ``count = passes·size + extra``: ranks below ``passes·size`` read the epoch's permutation
    ``passes`` times; the others read a window of ``extra`` places of the current cycle's
    permutation, the window moving on by ``extra`` each epoch (see the module docstring).

    Raises:
        ValueError: ``count`` draws asked of a source with no block.
    """
    at = np.asarray(ranks, dtype=np.int64)
    if size <= 0:
        if at.size or count:
            raise ValueError(f"source {source} has no block to draw {count} from")
        return at.copy()
    passes, extra = divmod(int(count), int(size))
    out = np.empty(at.shape, dtype=np.int64)
    whole = at < passes * size
    if whole.any():
        out[whole] = permute(at[whole] % size, size, permutation_key(seed, MIXTURE_SEED, source, 0, epoch))
    if not whole.all():
        cycle = -(-size // extra)  # epochs a window's permutation serves: its windows cover every block
        first = (int(epoch) % cycle) * extra
        places = (first + at[~whole] - passes * size) % size
        key = permutation_key(seed, MIXTURE_SEED, source, 1, int(epoch) // cycle)
        out[~whole] = permute(places, size, key)
    return out


def drawn_rows(
    slots: np.ndarray, blocks: Sequence[int], counts: Sequence[int], seed: int, epoch: int
) -> np.ndarray:
    """The block rows (int64) that ``slots`` of epoch ``epoch``'s draw serve; source ``i`` owns rows ``[sum(blocks[:i]), sum(blocks[:i+1]))``.

    O(len(slots)) memory: a batch of slots at a time, whatever the split's size.
    """
    source, rank = interleave(slots, counts)
    rows = np.empty(source.shape, dtype=np.int64)
    start = 0
    for i, (size, count) in enumerate(zip(blocks, counts)):
        mine = source == i
        if mine.any():
            rows[mine] = start + source_blocks(rank[mine], int(size), int(count), seed, i, epoch)
        start += int(size)
    return rows

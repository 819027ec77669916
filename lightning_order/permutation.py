"""A seeded permutation of ``range(size)`` computed per index: nothing of size ``size`` is ever built.

The global train order (:mod:`lightning_order.positions`) needs the sample at any position of an
epoch's shuffled order, on every rank, for any split size. A materialised permutation costs 8
bytes a sample on every rank (a 1 TB corpus: billions of blocks, gigabytes per rank, rebuilt each
epoch); this is a bijection evaluated where it is asked: a balanced Feistel network over the
smallest power-of-four domain holding ``size`` (every round invertible, so the network is a
permutation of the domain), with *cycle-walking*: a value that lands at or beyond ``size`` is
sent through the network again until it lands inside, which restricts the domain's permutation to
``range(size)`` and keeps it a bijection. The domain is below ``4·size``, so a position walks fewer
than 4 times on average.

Round keys come from xxh3 of ``(key, round)``; the round function is the splitmix64 finaliser.
The trade-off: a few dozen integer operations a sample instead of a table look-up, and an order
that is a pseudo-random permutation, not a uniformly drawn one (what a training order needs:
every sample once per epoch, a different order per epoch, the same on every rank).
"""

from __future__ import annotations

import numpy as np
import xxhash

__all__ = ["FEISTEL_ROUNDS", "permute", "permutation_key"]

#: Rounds of the Feistel network (6: every output bit depends on every input bit after 3).
FEISTEL_ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def permutation_key(*parts: int) -> int:
    """A 64-bit key from whole numbers (e.g. ``(seed, epoch)``): the identity of one permutation."""
    text = ":".join(str(int(p)) for p in parts).encode()
    return xxhash.xxh3_64_intdigest(text)


def _round_keys(key: int) -> list[np.uint64]:
    return [np.uint64(xxhash.xxh3_64_intdigest(f"{key}:{r}".encode())) for r in range(FEISTEL_ROUNDS)]


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (uint64 arithmetic wraps: that is the point)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def _feistel(x: np.ndarray, half: int, keys: list[np.uint64]) -> np.ndarray:
    """One pass of the network over the domain ``[0, 4**half)`` (``half`` bits a side)."""
    mask = np.uint64((1 << half) - 1)
    left, right = x >> np.uint64(half), x & mask
    for k in keys:
        left, right = right, left ^ (_mix(right ^ k) & mask)
    joined: np.ndarray = (left << np.uint64(half)) | right
    return joined


def permute(positions: np.ndarray, size: int, key: int) -> np.ndarray:
    """The values at ``positions`` of the permutation of ``range(size)`` named by ``key`` (int64, same shape).

    A bijection: ``permute(np.arange(size), size, key)`` holds every value of ``range(size)`` once.
    Memory is that of ``positions`` (a batch), whatever ``size``.

    Raises:
        IndexError: a position outside ``[0, size)``.
    """
    flat = np.asarray(positions, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= size):
        raise IndexError(f"a position is outside [0, {size})")
    if size <= 1:
        same: np.ndarray = flat.reshape(np.shape(positions)).copy()
        return same
    half = max(1, ((int(size) - 1).bit_length() + 1) // 2)
    keys = _round_keys(key)
    out = _feistel(flat.astype(np.uint64), half, keys)
    outside = np.flatnonzero(out >= np.uint64(size))
    while outside.size:  # cycle-walking: bounded, each value's cycle holds a value inside
        out[outside] = _feistel(out[outside], half, keys)
        outside = outside[out[outside] >= np.uint64(size)]
    return out.astype(np.int64).reshape(np.shape(positions))

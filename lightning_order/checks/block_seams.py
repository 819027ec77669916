"""A split after packing into files: ``train.bin`` / ``val.bin`` written from a random split of blocks.

Each stream is then a concatenation of blocks of ``P`` tokens cut mid-document, in random order:
at every multiple of ``P`` two unrelated document positions meet. The pair of tokens across such
a seam is a random bigram, far rarer in the train stream than the bigrams at any other offset
(which are real text). A correct stream is whole documents; its seams are arbitrary positions.

The statistic: the mean log count (in the train stream) of the bigram ending at each offset
``r`` of the period, ``r = 0 .. P-1``; ``z`` is the seam offset's mean against the other
``P - 1`` offsets' means (their mean and standard deviation). Measured on tests/run_clm.py's
corpus (``bench_block_seams.py``, benchmarks/README.md): correct streams ``z`` in [-0.8, 1.0],
planted in [-7.6, -5.4]. A violation needs ``z`` below :data:`Z_THRESHOLD` *and* both streams'
lengths exact multiples of ``P`` (chance 1/P² for correct streams): under the null ``z`` is a t
statistic with ``P - 2`` degrees of freedom, P(t < -4) ≈ 2e-4 at P = 33, so the false-alarm
rate is below 1e-6. Pure functions of arrays.
"""

from __future__ import annotations

import numpy as np

from lightning_order.rules import Violation

__all__ = ["MAX_TOKENS", "Z_THRESHOLD", "check_block_seams", "check_stream_seams", "seam_z"]

#: Train tokens the bigram counts are taken from at most (the first ones: a memory map reads only those).
MAX_TOKENS = 1 << 24
#: The seam offset's z below which the seams are random bigrams.
Z_THRESHOLD = -4.0


def seam_z(tokens: np.ndarray, period: int, max_tokens: int = MAX_TOKENS) -> float:
    """How much rarer the bigrams across every multiple of ``period`` are than those at other offsets.

    Args:
        tokens: the train token stream.
        period: the block length ``P`` whose seams are tested.
        max_tokens: tokens read at most.

    Returns:
        The z score of the seam offset (``nan`` when the stream is shorter than 4 periods).
    """
    x = np.asarray(tokens[:max_tokens], dtype=np.int64)
    if period < 3 or x.size < 4 * period:
        return float("nan")
    pairs = x[:-1] * (int(x.max()) + 1) + x[1:]
    _, inverse, counts = np.unique(pairs, return_inverse=True, return_counts=True)
    # position j holds the log count of the bigram (x[j-1], x[j]); position 0 has none
    logs = np.concatenate([[np.nan], np.log(counts[inverse.ravel()])])
    rows = logs.size // period
    means = np.nanmean(logs[: rows * period].reshape(rows, period), axis=0)
    others = means[1:]
    spread = float(others.std(ddof=1))
    return float((means[0] - others.mean()) / spread) if spread > 0 else float("nan")


def check_block_seams(
    train_tokens: int, val_tokens: int, period: int, z: float, *, threshold: float = Z_THRESHOLD
) -> list[Violation]:
    """``train-val-overlap`` when both streams are whole blocks of ``period`` tokens with random seams.

    Args:
        train_tokens: the train stream's length.
        val_tokens: the validation stream's length.
        period: the block length tested.
        z: :func:`seam_z` of the train stream at ``period``.
        threshold: the largest ``z`` that raises.

    Returns:
        One violation naming the block length and the fix; or nothing.
    """
    if not (train_tokens % period == 0 and val_tokens % period == 0 and z < threshold):
        return []
    return [
        Violation(
            "train-val-overlap",
            ("split",),
            f"train.bin ({train_tokens} tokens) and val.bin ({val_tokens}) are both whole blocks of {period} "
            f"tokens, and the token pairs across every block seam are far rarer than elsewhere (z = {z:.1f}): "
            "the blocks were cut from one stream and split at random, so documents are on both sides",
            fix="split the documents first (by a hash of the cleaned text), then tokenize and write each split's "
            "documents whole into its own file (train.bin, val.bin); never split the blocks of one stream",
            details={"period": period, "z": z, "train_tokens": train_tokens, "val_tokens": val_tokens},
        )
    ]


def check_stream_seams(train: np.ndarray, val_tokens: int, window: int) -> list[Violation]:
    """:func:`check_block_seams` at the window length and at one less (blocks of ``x`` plus or without ``y``'s last token).

    The bigram counts are only taken when both lengths are whole periods (a cheap filter first).
    """
    for period in (window, window - 1):
        if period > 2 and train.size % period == 0 and val_tokens % period == 0:
            found = check_block_seams(int(train.size), val_tokens, period, seam_z(train, period))
            if found:
                return found
    return []

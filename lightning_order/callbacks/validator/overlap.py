"""Train/validation overlap on any datamodule: which evidence decides, from the best there is.

Gathering only (the judgements are :mod:`lightning_order.checks.leakage` and
:mod:`lightning_order.checks.datasets`). In order of strength: the key hashes of both splits
(``OrderedDataModule`` keeps one per row: exact), else the content summary's hashes of every
item's inputs (or of the same sample on every rank), else the inputs of sampled rows. A rate
extrapolated from samples carries its sample size and confidence interval
(:mod:`lightning_order.checks.estimates`); one too weak to raise is logged as such.

For packed LM data (windows of token ids) the content hashes are of each window's inputs: a
validation document with an exact twin in train gives windows identical to train windows, so
the rate is of windows, not documents. When both splits' windows are cut from flat token arrays
(nanoGPT's ``train.bin``), every validation window is checked against every train token
(:mod:`lightning_order.checks.windows`: whole documents matched, not shared phrases), evidence
``"token-stream"``. When both splits are subsets of one dataset of windows of one stream
(``random_split`` after packing), the windows' places in the stream decide
(:mod:`lightning_order.checks.packed_split`), evidence ``"token-subsets"``. Document-level overlap is exact when the datamodule
keeps one ``key_hash`` per document (``OrderedLMDataModule`` does; see docs/lm.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pytorch_lightning.utilities.rank_zero import rank_zero_info

from lightning_order.callbacks.validator.batches import batch_inputs, sample_batch
from lightning_order.callbacks.validator.evidence import split_key_hashes
from lightning_order.callbacks.validator.stream_tokens import StreamRead, is_stream, read_split_tokens
from lightning_order.callbacks.validator.tokens import chunks, separator_ids, split_stream, subset_windows
from lightning_order.checks.block_seams import check_stream_seams
from lightning_order.checks.datasets import check_twin_rate, twin_estimate
from lightning_order.checks.estimates import MIN_HITS, RateEstimate
from lightning_order.checks.leakage import check_key_overlap, check_row_overlap, row_hashes
from lightning_order.checks.packed_split import check_packed_split, cut_windows
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.checks.windows import check_window_overlap, window_overlap
from lightning_order.rules import Violation

__all__ = ["overlap_check"]


def overlap_check(
    dm: Any,
    train_sample: tuple[Any, int | None],
    content: Mapping[str, Any] | None,
    *,
    max_rows: int,
    threshold: float,
    sample_rows: int,
) -> tuple[str | None, list[Violation]]:
    """``train-val-overlap`` from the strongest evidence ``dm`` offers, and which evidence that was.

    Args:
        dm: the datamodule (``None``: nothing to compare).
        train_sample: ``(batch, dataset size)`` sampled from the train split, or ``(None, None)``.
        content: the content summary of each split (:func:`~lightning_order.callbacks.validator.content.summarize_splits`).
        max_rows: key hashes compared per split at most.
        threshold: the share of validation rows with a train twin that passes (content hashes).
        sample_rows: validation rows sampled when only sampled rows are left.

    Returns:
        ``(evidence, violations)``: ``"key-hash"`` (both splits' key hashes), ``"stream-read"`` (an
        iterable train split read as tokens up to a budget, every validation window against them),
        ``"token-stream"``
        (every validation window against all train tokens), ``"token-subsets"`` (a split after
        packing found from the windows' places in one stream), ``"content"``
        (every train item's content hash), ``"content-sample"`` (the same items sampled on every
        rank), ``"rows-sample"`` (sampled rows' inputs) or ``None`` (nothing to compare).
    """
    if dm is None:
        return None, []
    train, val = split_key_hashes(dm, "train"), split_key_hashes(dm, "val")
    if train is not None and val is not None:
        # Subsampled above max_rows by hash value, which keeps a shared key on both sides or neither.
        return "key-hash", check_key_overlap(train, val, max_rows=max_rows)
    streams = split_stream(dm, "train"), split_stream(dm, "val")
    if streams[0] is not None and streams[1] is not None and streams[0][1] == streams[1][1]:
        # Windows cut from flat token arrays: every validation window against every train token.
        (train_tokens, window), (val_tokens, _) = streams[0], streams[1]
        result = window_overlap(val_tokens, chunks(train_tokens), window, separator_ids(dm))
        found = check_window_overlap(result, threshold=threshold)
        # Blocks of one stream split at random into the two files: their seams give it away.
        found = found or check_stream_seams(train_tokens, int(val_tokens.size), window)
        if result.twins and not found:
            rank_zero_info(
                f"OrderValidator: {result.twins} of {result.windows} validation windows lie inside documents "
                f"that train holds too ({result.rate:.2%}); no violation (threshold {threshold:.1%})"
            )
        return "token-stream", found
    packed = subset_windows(dm)
    if packed is not None:  # random_split of the windows of one stream: a split after packing
        cut = cut_windows(
            packed["stream"],
            packed["train_starts"],
            packed["val_starts"],
            packed["window"],
            packed["stride"],
            separator_ids(dm),
        )
        found = check_packed_split(
            cut, whole=packed["whole"], threshold=threshold, stride=packed["stride"], window=packed["window"]
        )
        if found:
            return "token-subsets", found
    stream = _stream_overlap(dm, threshold)
    if stream is not None:  # an iterable train split, read as tokens on a copy up to a budget
        return "stream-read", stream
    train_part, val_part = (content or {}).get("train"), (content or {}).get("val")
    if train_part and val_part and not train_part.get("random") and not val_part.get("random"):
        # Hashes of every item's inputs (or of the same sample on every rank): the twin rate.
        evidence = "content" if train_part["whole"] else "content-sample"
        sizes = {
            "train_rows": None if train_part["whole"] else train_part["length"],
            "val_rows": None if val_part["whole"] else val_part["length"],
        }
        found = check_twin_rate(train_part["inputs"], val_part["inputs"], threshold=threshold, **sizes)
        _say(twin_estimate(train_part["inputs"], val_part["inputs"], **sizes), found)
        return evidence, found
    train_batch, train_rows = train_sample
    if train_batch is None:
        return None, []
    # No key hashes: hash the inputs of sampled rows.
    val_batch, _ = sample_batch(dm, "val_dataloader", sample_rows)
    train_inputs, val_inputs = batch_inputs(train_batch), batch_inputs(val_batch)
    if not train_inputs or not val_inputs or len(train_inputs) != len(val_inputs):
        return None, []
    found = check_row_overlap(
        row_hashes(*train_inputs),
        row_hashes(*val_inputs),
        train_rows=train_rows,
        threshold=threshold,
        unknown_size=train_rows is None,  # an iterable split: its rows read are a sample (#37)
    )
    return "rows-sample", found


def _stream_overlap(dm: Any, threshold: float) -> list[Violation] | None:
    """Validation windows against the first :data:`~.budget.STREAM_TOKENS` of an iterable train split.

    ``None`` when train is no stream, or either split gives no token ids (the row sample decides).
    """
    if not is_stream(dm, "train"):
        return None
    train = read_split_tokens(dm, "train")
    flat = split_stream(dm, "val") if train is not None else None
    # A validation split of windows of one flat array (val.bin) is that array; else its rows joined.
    val = StreamRead(np.asarray(flat[0]), flat[1], 0, True) if flat is not None else None
    val = val or (read_split_tokens(dm, "val") if train is not None else None)
    if train is None or val is None:
        return None
    window = max(val.window, 2)
    result = window_overlap(val.tokens, chunks(train.tokens), window, separator_ids(dm))
    found = check_window_overlap(result, threshold=threshold, train_whole=train.whole)
    read = "all of it" if train.whole else f"its first {train.tokens.size} tokens (the budget)"
    rank_zero_info(
        f"OrderValidator: the iterable train split read as a token stream, {read}; {result.twins} of "
        f"{result.windows} validation windows{'' if val.whole else ' read'} lie inside documents found in it"
        + ("" if found else f" ({result.rate:.2%}, threshold {threshold:.1%}): no violation")
    )
    return found


def _say(estimate: RateEstimate | None, found: list[Violation]) -> None:
    """A twin rate too weakly supported to raise is still said, with its sample and interval."""
    if estimate is not None and estimate.hits and not found:
        rank_zero_info(
            f"OrderValidator: validation rows with a train twin: {estimate.describe('validation rows')}; "
            f"no violation (a sampled rate needs at least {MIN_HITS} twins with its interval above the threshold)"
        )


def _gather_overlap(trainer: Any, evidence: CheckEvidence) -> tuple[str | None, list[Violation]]:
    samples, settings = evidence.samples, evidence.settings
    return overlap_check(
        evidence.datamodule,
        (samples.get("train"), samples.get("train_size")),
        samples.get("content") or {},
        max_rows=int(settings["overlap_max_rows"]),
        threshold=float(settings["overlap_threshold"]),
        sample_rows=int(settings["sample_rows"]),
    )


register_check(
    "train-val-overlap",
    lambda evidence: evidence.gathered[1],
    phase=Phase.SETUP,
    reads=[EvidenceKind.SAMPLES],
    rules=("train-val-overlap",),
    gather=_gather_overlap,
    order=20,
    facts=lambda gathered, _ranks: {"overlap": gathered[0]},
)

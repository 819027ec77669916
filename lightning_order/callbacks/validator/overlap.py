"""Train/validation overlap: the best evidence a run offers, and which evidence that was.

Key hashes, the splits' token streams (a table's blocks read off Arrow, a map-style split's
windows, an iterable split's tokens read without consuming it) or sampled rows: the overlap check
(``train-val-overlap``) takes the strongest one the data allows and says which it was.

**The overlap check.** Train/validation overlap on any datamodule: which evidence decides, from the best there is.

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

**The splits' token streams.** The token ids behind a split's windows, for the window-overlap check: no glue, no sampling.

Gathering only (the judgement is :mod:`lightning_order.checks.windows`). A nanoGPT-style
dataset reads windows of one flat token array (``train.bin`` as a memory map, or a tensor):
when a split's dataset holds a 1-D integer array whose first tokens are its first item's input
ids, that array *is* the split, and the check reads all of it in chunks (memory: one chunk).
Anything else (wrapped subsets, text, ragged rows) gives ``None`` and the item-level evidence
decides, as before.

**Blocks of an Arrow table.** Both splits as row selections of one Arrow table of packed blocks: a split made after packing.

Gathering only (the judgement is :mod:`lightning_order.checks.packed_split`). run_clm-style
pipelines pack with ``datasets``: ``map(group_texts)`` turns the documents into a table of
equal-length blocks cut from one token stream, in stream order. When the blocks are then
shuffled and ``train_test_split``, both splits are ``datasets.Dataset`` objects whose index
mappings select disjoint rows of that *same* table; a correct pipeline splits the text first,
so each split packs its own table. The shared table is exact lineage: row ``i`` of it is the
stream's tokens ``[i * L, (i + 1) * L)``, and the packed-split check asks which validation
blocks have a train block next to them in the same document.

Read duck-typed: ``datasets`` is never imported here (an object is only taken for a dataset
when its type comes from that package, already imported by the user's code).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from lightning_order.callbacks.validator.reading import (
    StreamRead,
    batch_inputs,
    is_label,
    is_stream,
    leaf_array,
    leaves,
    read_split_tokens,
    sample_batch,
    split_dataset,
    split_key_hashes,
    untouched,
)
from lightning_order.checks.block_seams import check_stream_seams
from lightning_order.checks.datasets import check_twin_rate, twin_estimate
from lightning_order.checks.estimates import MIN_HITS, RateEstimate
from lightning_order.checks.leakage import check_key_overlap, check_row_overlap, row_hashes
from lightning_order.checks.packed_split import check_packed_split, cut_windows
from lightning_order.checks.registry import CheckEvidence, EvidenceKind, Phase, register_check
from lightning_order.checks.windows import check_window_overlap, window_overlap
from lightning_order.distributed import rank_zero_info
from lightning_order.rules import Violation

__all__ = [
    "CHUNK_TOKENS",
    "MAX_VAL_WINDOWS",
    "chunks",
    "column_stream",
    "overlap_check",
    "separator_ids",
    "split_stream",
    "subset_windows",
    "table_blocks",
]


# == The overlap check =============================================================================
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
    """Validation windows against the first :data:`~.reading.STREAM_TOKENS` of an iterable train split.

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


# == The splits' token streams =====================================================================
#: Train tokens hashed per chunk (64 MiB of uint64 hashes per pass at most).
CHUNK_TOKENS = 1 << 23


def _input_ids(item: Any) -> np.ndarray | None:
    """The first integer array leaf of an item that is not its label (a window's input ids)."""
    for path, leaf in leaves(item):
        array = leaf_array(leaf)
        if (
            not is_label(path)
            and array is not None
            and array.ndim == 1
            and np.issubdtype(array.dtype, np.integer)
        ):
            return array
    return None


def _as_array(value: Any) -> np.ndarray | None:
    if (
        torch.is_tensor(value)
        and value.ndim == 1
        and not value.is_floating_point()
        and value.device.type == "cpu"
    ):
        return value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 1 and np.issubdtype(value.dtype, np.integer):
        return value
    return None


def split_stream(dm: Any, split: str) -> tuple[np.ndarray, int] | None:
    """``(tokens, window)``: the flat token array a split's windows are cut from, and the window length.

    The array is accepted only when it is at least as long as the dataset and starts with the
    first item's input ids (so an index array or unrelated buffer is never taken for the data);
    the window is the item's input length plus one (the label's extra token).

    Returns:
        ``None`` when the split has no such array.
    """
    dataset, _ = split_dataset(dm, split) if dm is not None else (None, None)
    found = _stream_of(dataset)
    if found is None:  # packed blocks in a datasets table: windows of the block length
        return None if _one_table(dm) else column_stream(dataset)
    return found[0], int(found[1].size) + 1


def _one_table(dm: Any) -> bool:
    """Both splits select rows of one table of blocks: the packed-split check judges, with the rows' places."""
    train, _ = split_dataset(dm, "train")
    val, _ = split_dataset(dm, "val")
    return table_blocks(train, val) is not None


def _item_ids(dataset: Any, index: int) -> np.ndarray | None:
    try:
        with untouched(dataset) as blocked:  # an item may draw random numbers or count its reads
            return _input_ids(dataset[index]) if blocked is None else None
    except Exception:  # an item that cannot be read by index: no stream
        return None


def _stream_of(dataset: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(tokens, first item's ids)`` when ``dataset`` holds the flat array its first item starts."""
    if dataset is None or not hasattr(dataset, "__dict__") or not len(dataset):
        return None
    first = _item_ids(dataset, 0)
    if first is None or not first.size:
        return None
    for value in vars(dataset).values():
        tokens = _as_array(value)
        if tokens is None or tokens.size < len(dataset) or tokens.size < first.size:
            continue
        if np.array_equal(np.asarray(tokens[: first.size], dtype=np.int64), first.astype(np.int64)):
            return tokens, first
    return None


#: Validation windows checked at most for a split made after packing (a uniform sample above).
MAX_VAL_WINDOWS = 100_000


def subset_windows(dm: Any) -> dict[str, Any] | None:
    """Both splits as subsets of one dataset of windows cut from one token stream, or ``None``.

    ``torch.utils.data.Subset`` (what ``random_split`` returns) of the same dataset on both
    sides, that dataset holding the flat token array (see :func:`split_stream`) and its item 1
    starting 1, ``window - 1`` or ``window`` tokens after item 0 (the stride); or two
    ``datasets.Dataset`` row selections of one table of packed blocks
    (:func:`~lightning_order.callbacks.validator.overlap.table_blocks`).

    Returns:
        ``{"stream", "train_starts", "val_starts", "window", "stride", "whole"}``: the stream
        offsets of every train window and of the validation windows checked (all of them, or a
        seeded sample of :data:`MAX_VAL_WINDOWS`).
    """
    train, _ = split_dataset(dm, "train") if dm is not None else (None, None)
    val, _ = split_dataset(dm, "val") if dm is not None else (None, None)
    subset = torch.utils.data.Subset
    if not isinstance(train, subset) and not isinstance(val, subset):  # datasets' own split (select)
        return table_blocks(train, val)
    if not isinstance(train, subset) or not isinstance(val, subset) or train.dataset is not val.dataset:
        return None
    base: Any = train.dataset
    found = _stream_of(base)
    second = _item_ids(base, 1) if found is not None and len(base) > 1 else None
    if found is None or second is None:
        return None
    tokens, first = found
    width = first.size
    stride = next(
        (
            s
            for s in (1, width, width + 1)
            if tokens.size >= s + width and np.array_equal(np.asarray(tokens[s : s + width]), second)
        ),
        None,
    )
    if stride is None:
        return None
    val_index = np.asarray(val.indices, dtype=np.int64)
    whole = val_index.size <= MAX_VAL_WINDOWS
    if not whole:
        val_index = np.random.default_rng(0).choice(val_index, size=MAX_VAL_WINDOWS, replace=False)
    return {
        "stream": tokens,
        "train_starts": np.asarray(train.indices, dtype=np.int64) * stride,
        "val_starts": val_index * stride,
        "window": width + 1,
        "stride": stride,
        "whole": whole,
    }


#: Token names that end or open a document, looked up when the tokenizer names none.
_SEPARATORS = ("<|endoftext|>", "</s>", "<s>", "<|end_of_text|>", "<|begin_of_text|>", "<eos>", "<bos>")


def separator_ids(dm: Any) -> tuple[int, ...]:
    """The ids of the datamodule tokenizer's end-of-text and BOS tokens (``dm.tokenizer``), or ``()``.

    A ``transformers`` tokenizer's ``eos_token_id`` / ``bos_token_id``, else the ids of the usual
    separator names its vocabulary declares (a ``tokenizers.Tokenizer`` too).
    """
    tokenizer = getattr(dm, "tokenizer", None)
    if tokenizer is None:
        return ()
    # eos_id / bos_id: litgpt's Tokenizer (#48).
    found = {getattr(tokenizer, name, None) for name in ("eos_token_id", "bos_token_id", "eos_id", "bos_id")}
    lookup: Any = getattr(tokenizer, "token_to_id", None) or getattr(tokenizer, "convert_tokens_to_ids", None)
    unknown = getattr(tokenizer, "unk_token_id", None)
    for name in _SEPARATORS if lookup is not None else ():
        try:
            found.add(lookup(name))
        except Exception:  # a tokenizer that refuses unknown names: that name is no separator
            continue
    return tuple(sorted(int(i) for i in found if isinstance(i, int) and i != unknown))


def chunks(tokens: np.ndarray, size: int = CHUNK_TOKENS) -> Iterator[np.ndarray]:
    """Consecutive pieces of ``tokens`` (a memory map is read one piece at a time)."""
    for start in range(0, tokens.size, size):
        yield np.asarray(tokens[start : start + size])


# == Blocks of an Arrow table ======================================================================
#: The column holding each block's token ids (run_clm's, and the Hugging Face convention).
IDS = "input_ids"


def _is_arrow_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("datasets.") and hasattr(obj, "data") and hasattr(obj, "_indices")


def _rows(dataset: Any) -> np.ndarray | None:
    """The table rows a dataset selects (its index mapping), or ``None`` when it selects the whole table."""
    mapping = getattr(dataset, "_indices", None)  # datasets exposes no public accessor for it
    if mapping is None:
        return None
    return np.asarray(mapping.column("indices").to_numpy(), dtype=np.int64)


def _same_table(train: Any, val: Any) -> bool:
    """The same Arrow table under both splits: one object, the same cache files, or equal tables.

    In memory, ``select`` gives each split its own copy of the table: equal content (same row
    count, same values) is then the lineage; separately packed splits never have equal tables.
    """
    if train.data is val.data:
        return True
    files = [f.get("filename") for f in getattr(train, "cache_files", None) or []]
    if files:
        return files == [f.get("filename") for f in getattr(val, "cache_files", None) or []]
    first, second = getattr(train.data, "table", train.data), getattr(val.data, "table", val.data)
    return bool(first.num_rows == second.num_rows and first.equals(second))


def _blocks(table: Any) -> tuple[np.ndarray, int] | None:
    """``(stream, L)``: the table's ``input_ids`` rows joined in row order, when every row has ``L`` tokens.

    Rows padded to one length (an ``attention_mask`` with zeros) are documents, not blocks: ``None``.
    """
    if IDS not in table.column_names:
        return None
    ids = table.column(IDS).combine_chunks()
    offsets = getattr(ids, "offsets", None)
    if offsets is None:
        return None
    lengths = np.diff(np.asarray(offsets.to_numpy(), dtype=np.int64))
    if not lengths.size or lengths[0] < 2 or np.any(lengths != lengths[0]):
        return None
    if "attention_mask" in table.column_names:
        mask = table.column("attention_mask").combine_chunks().flatten().to_numpy()
        if not np.all(np.asarray(mask) == 1):
            return None
    stream = np.asarray(ids.flatten().to_numpy(), dtype=np.int64)
    return stream, int(lengths[0])


def table_blocks(train: Any, val: Any) -> dict[str, Any] | None:
    """Both splits as disjoint row selections of one table of packed blocks, or ``None``.

    Args:
        train: the train split's dataset.
        val: the validation split's dataset.

    Returns:
        ``{"stream", "train_starts", "val_starts", "window", "stride", "whole"}`` as
        :func:`~lightning_order.callbacks.validator.overlap.subset_windows` gives them: every
        row of both splits (``whole``), blocks ``L`` tokens long and ``L`` apart.
    """
    if not _is_arrow_dataset(train) or not _is_arrow_dataset(val) or not _same_table(train, val):
        return None
    train_rows, val_rows = _rows(train), _rows(val)
    if train_rows is None or val_rows is None or not train_rows.size or not val_rows.size:
        return None
    if np.intersect1d(train_rows, val_rows).size:  # not a split of the rows: another check's business
        return None
    found = _blocks(train.data)
    if found is None:
        return None
    stream, length = found
    return {
        "stream": stream,
        "train_starts": train_rows * length,
        "val_starts": val_rows * length,
        "window": length,
        "stride": length,
        "whole": True,
    }


def column_stream(dataset: Any) -> tuple[np.ndarray, int] | None:
    """``(tokens, L)``: a ``datasets.Dataset`` of packed blocks read as one stream, rows in the split's order.

    The ``input_ids`` column is read through ``with_format("arrow")``, which applies the split's
    index mapping, so only the split's own rows are read. Rows packed in order (``group_texts``)
    join back into the stream they were cut from; rows shuffled meet at random seams, where an
    n-gram across two rows matches nothing (the overlap check may miss there, never alarm).

    Returns:
        ``None`` unless ``dataset`` is a ``datasets.Dataset`` of equal-length, unpadded rows.
    """
    if not _is_arrow_dataset(dataset) or not len(dataset):
        return None
    try:
        table = dataset.with_format("arrow")[:]
    except Exception:  # a dataset that cannot be read as Arrow: no stream
        return None
    return _blocks(table)

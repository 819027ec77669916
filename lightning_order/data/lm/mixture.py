"""Weighted mixtures of several sources: the sources as declared, read, and the draw of train blocks by weight.

A mixture is several sources (:class:`LMSource`: files and a weight), read by ``load`` into one
corpus whose every document keeps the index of its source (a ``source`` column), cleaned and
deduplicated *together* (a near-duplicate across sources is one document), split by each
document's hash (so each source is split at ``val_fraction``), encoded and packed *per source*
(``split`` writes each source's documents to files of their own: a block never spans two sources).

The weights act on the train order only: each epoch draws, from each source's range of train
blocks, as many blocks as its weight asks of the split's total (:func:`mixture_index`: each block
of a source drawn the floor or the ceiling of count / size times, the extra draws moving on each
epoch where the last stopped, so a downsampled source serves all its blocks over the epochs and
an upsampled one repeats them), interleaved so every prefix holds the sources near their
weights. :class:`MixedOrder` reads the positions of the global order
(:mod:`lightning_order.positions`) through that draw, computed per position
(:mod:`lightning_order.data.lm.mixture_draw`: no rank holds an epoch's draw), so batches, ranks
and the exact mid-epoch resume are those of any train split. The trade-off: an epoch holds
as many blocks as the split (an upsampled source repeats blocks within an epoch), and a block is
the unit of the shares (a source's share is counted in whole blocks of ``block_size + 1`` tokens).

Plain data and numpy only; :func:`mixture_record` is what ``pack`` records and the
``mixture-off-weight`` check (:mod:`lightning_order.checks.mixture`) reads.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from lightning_order.data.lm.mixture_draw import MIXTURE_ALGORITHM, MIXTURE_SEED, drawn_rows, interleave
from lightning_order.errors import DataError
from lightning_order.positions import GlobalOrder

__all__ = [
    "MAX_WEIGHT_RATIO",
    "MIXTURE_SEED",
    "SOURCE_COLUMN",
    "LMSource",
    "MixedOrder",
    "mixture_counts",
    "mixture_figure",
    "mixture_index",
    "mixed_order",
    "mixture_record",
    "normalise_sources",
    "read_sources",
    "source_column",
    "source_config",
    "sources_identity",
]

#: The column that holds each document's source index (only in a mixture's partitions).
SOURCE_COLUMN = "source"
#: The most the largest weight may be of the smallest: a share below a billionth draws no block of any
#: corpus under a billion blocks, and the ratio keeps the normalisation far from overflow and underflow.
MAX_WEIGHT_RATIO = 1e9
#: Significant digits the normalised weights keep: 7 / 3 and 0.7 / 0.3 are one mixture, one cache key.
_WEIGHT_DIGITS = 12


@dataclass(frozen=True)
class LMSource:
    """One source of a mixture: its files, its weight in the train tokens, and a name.

    Attributes:
        path: a path, a glob, a folder or a list of them (``~`` and ``$VAR`` expanded), as
            ``data_files``.
        weight: its share of the train tokens, relative to the other sources' (any positive real
            number, numpy's included; the config holds it normalised: the weights sum to 1, so
            ``7, 3`` and ``0.7, 0.3`` are one mixture).
        name: how the ledger and ``audit`` name it (default: ``path`` when it is one string, else
            ``source-<i>``).
        dataset: the ``datasets`` builder that reads its files (``"text"``, ``"json"``, ``"csv"``,
            ``"parquet"``).
        text_column: the column of its files that holds the text (``None``: the config's
            ``text_column``; a ``"text"`` source's column is always ``"text"``, its builder's).
    """

    path: str | list[str]
    weight: float
    name: str | None = None
    dataset: str = "text"
    text_column: str | None = None


def _as_source(item: Any, index: int) -> LMSource:
    if isinstance(item, LMSource):
        return item
    if isinstance(item, Mapping):
        unknown = set(item) - {"path", "weight", "name", "dataset", "text_column"}
        if unknown or "path" not in item or "weight" not in item:
            raise DataError(
                f"source {index} must give path and weight (and optionally name, dataset, text_column), got "
                f"{dict(item)!r}; "
                "e.g. {'path': 'corpus/web/*.txt', 'weight': 0.7}",
                step="load",
            )
        return LMSource(**item)
    raise DataError(
        f"source {index} must be an LMSource or a mapping with path and weight, got {type(item).__name__}",
        step="load",
    )


def normalise_sources(value: Any) -> tuple[LMSource, ...] | None:
    """``sources`` as given (a list of :class:`LMSource` or mappings, or a mapping path -> weight), checked and named.

    The weights are normalised (shares summing to 1, rounded to 12 significant digits): what
    the cache key, the ledger and the draw read, so weights that differ only in scale are one
    mixture.

    Raises:
        DataError: no source, a weight that is not a positive finite real number or is more than
            :data:`MAX_WEIGHT_RATIO` times smaller than the largest, a path that is not a string
            or a list of strings, a text column that is not a name (or not ``"text"`` for a
            ``"text"`` source), or two sources of one name; each naming the source.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        items: list[Any] = [LMSource(path=str(k), weight=v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise DataError(
            f"sources must be a list of LMSource (path, weight) or a mapping path -> weight, got "
            f"{type(value).__name__}; e.g. sources={{'web/*.txt': 0.7, 'code/*.txt': 0.3}}",
            step="load",
        )
    if not items:
        raise DataError("sources is empty; give at least one source, or sources=None", step="load")
    out: list[LMSource] = []
    for i, item in enumerate(items):
        source = _as_source(item, i)
        paths = [source.path] if isinstance(source.path, str) else source.path
        if (
            not isinstance(paths, (list, tuple))
            or not paths
            or not all(isinstance(p, str) and p for p in paths)
        ):
            raise DataError(
                f"the path of source {i} must be a path or a list of paths, got {source.path!r}", step="load"
            )
        name = source.name or (source.path if isinstance(source.path, str) else f"source-{i}")
        weight = source.weight
        # numbers.Real: numpy's scalars too (np.float32(0.7) is not a float); a bool is not a weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, numbers.Real)
            or not 0 < float(weight) < math.inf
        ):
            raise DataError(
                f"the weight of source {i} ({name!r}) must be a positive finite number, got {weight!r}; "
                "e.g. weight=0.7",
                step="load",
            )
        _check_text_column(source, i, name)
        out.append(replace(source, name=name, weight=float(weight)))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise DataError(f"two sources share a name ({names}); give each a distinct name", step="load")
    return tuple(replace(s, weight=w) for s, w in zip(out, _shares(out)))


def _check_text_column(source: LMSource, index: int, name: str) -> None:
    column = source.text_column
    if column is None:
        return
    if not isinstance(column, str) or not column:
        raise DataError(
            f"the text_column of source {index} ({name!r}) must be a column name, got {column!r}", step="load"
        )
    if source.dataset == "text" and column != "text":
        raise DataError(
            f"source {index} ({name!r}) reads text files, whose only column is 'text', got text_column="
            f"{column!r}; leave text_column out for it (or read its files with dataset='json' or 'csv')",
            step="load",
            column=column,
        )


def _shares(sources: Sequence[LMSource]) -> list[float]:
    """The weights as shares summing to 1, rounded: refused, naming the source, where one is too small to draw.

    Divided by the largest first, so weights near the float limit (1e308) never overflow their sum.
    """
    largest = max(s.weight for s in sources)
    scaled = [s.weight / largest for s in sources]
    for i, (source, share) in enumerate(zip(sources, scaled)):
        if share * MAX_WEIGHT_RATIO < 1:
            raise DataError(
                f"the weight of source {i} ({source.name!r}) is {source.weight!r}, less than 1/{MAX_WEIGHT_RATIO:g} "
                f"of the largest ({largest!r}): it would draw no block; give it a larger weight or leave it out",
                step="load",
            )
    total = math.fsum(scaled)
    return [float(f"{share / total:.{_WEIGHT_DIGITS}g}") for share in scaled]


def source_config(cfg: Any, source: LMSource) -> Any:
    """``cfg`` as the single-source config that reads ``source``'s files (with its own text column)."""
    return replace(
        cfg,
        sources=None,
        dataset=source.dataset,
        data_files=source.path,
        text_column=source_column(cfg, source),
    )


def source_column(cfg: Any, source: LMSource) -> str:
    """The column that holds ``source``'s text: ``"text"`` for text files, else its own or the config's ``text_column``."""
    if source.dataset == "text":
        return "text"  # datasets' text builder names its only column "text", whatever the config's
    return source.text_column or cfg.text_column


def sources_identity(cfg: Any) -> list[dict[str, Any]]:
    """Each source's name, builder, normalised weight, text column and files' identity (content hashes): the mixture's cache identity.

    A name taken from the source's path (none given) is left out: the path is where the files
    are, and one mixture read from two places (or from object storage) has one key.
    """
    out = []
    for source in cfg.source_list:
        sub = source_config(cfg, source)
        out.append(
            {
                "name": None if source.name == source.path else source.name,
                "dataset": source.dataset,
                "weight": source.weight,
                "text_column": sub.text_column,
                "files": sub.input_identity,
                "sample_by": cfg.sample_by if source.dataset == "text" else None,
            }
        )
    return out


def read_sources(cfg: Any, work: Path, engine: Any = None) -> tuple[Any, dict[str, Any]]:
    """Every source's documents as one :class:`~.documents.Chunks`, each chunk tagged with its source's index.

    Each source is read as a single-source config would read it (``max_documents`` per source);
    its chunks follow the previous source's, so the corpus order is source by source.

    Returns:
        ``(chunks, info)``: ``info`` holds ``null_rows`` and ``source_rows`` (rows read per source).
    """
    from lightning_order.data.lm.documents import Chunks, read_input

    chunks: list[Any] = []
    rows, text_bytes, nulls, per_source = 0, 0, 0, []
    for i, source in enumerate(cfg.source_list):
        try:
            found, info = read_input(source_config(cfg, source), work / f"source-{i:03d}", engine)
        except DataError as err:
            raise _source_error(err, i, source) from err
        chunks.extend(replace(c, index=len(chunks) + j, origin=i) for j, c in enumerate(found.sources))
        rows += found.rows
        text_bytes += found.text_bytes
        nulls += int(info["null_rows"])
        per_source.append(found.rows)
    return Chunks(tuple(chunks), rows, text_bytes), {"null_rows": nulls, "source_rows": per_source}


def _source_error(err: DataError, index: int, source: LMSource) -> DataError:
    """``err`` of reading one source, naming the source (and where its text column is set)."""
    said = str(err)
    prefix = str(DataError("", step=err.step, column=err.column))
    said = said[len(prefix) :] if said.startswith(prefix) else said
    if "text_column" in said:
        said += " (this source's own: LMSource(..., text_column=...); in YAML, text_column under the source)"
    return DataError(
        f"source {index} ({source.name!r}) read with dataset={source.dataset!r}: {said}",
        step=err.step,
        column=err.column,
    )


def mixture_counts(blocks: Sequence[int], weights: Sequence[float]) -> list[int]:
    """Train blocks to draw from each source: the split's total shared by weight (largest remainders).

    A source with no train block draws none (its weight cannot be met: the check reports it).
    """
    total = int(sum(blocks))
    usable = [float(w) if b > 0 else 0.0 for w, b in zip(weights, blocks)]
    norm = sum(usable)
    if total == 0 or norm == 0:
        return [0] * len(blocks)
    exact = [total * w / norm for w in usable]
    counts = [math.floor(x) for x in exact]
    # ties to the earlier source: the draw is a function of the weights alone
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def mixture_index(blocks: Sequence[int], counts: Sequence[int], seed: int, epoch: int = 0) -> np.ndarray:
    """The block rows (int64) epoch ``epoch`` serves: ``counts[s]`` of source ``s``'s range, interleaved by weight.

    Source ``s`` owns rows ``[sum(blocks[:s]), sum(blocks[:s+1]))`` of the train block file. Each
    of its blocks is drawn ``⌊counts[s]/blocks[s]⌋`` or ``⌈counts[s]/blocks[s]⌉`` times an epoch,
    the extra draws moving on each epoch where the last stopped: a downsampled source serves all
    its blocks over the epochs, an upsampled one repeats them. The sources are interleaved so every
    prefix holds each source near its share (:mod:`lightning_order.data.lm.mixture_draw`).

    The whole of it (8 bytes a drawn block): for checks and tests; a loader reads
    :meth:`MixedOrder.order_at`, a batch of positions at a time.
    """
    total = int(sum(int(c) for c in counts))
    return drawn_rows(np.arange(total, dtype=np.int64), blocks, counts, seed, epoch)


@dataclass(frozen=True)
class MixedOrder(GlobalOrder):
    """The global order of a mixture's train split: the positions of :class:`GlobalOrder`, read through each epoch's draw.

    A position names a slot of the epoch's draw (:func:`mixture_index`), whose row it serves,
    computed per position (:func:`~lightning_order.data.lm.mixture_draw.drawn_rows`): the order
    is a function of the seed and the epoch alone, the same on any number of ranks, so a run
    resumed mid-epoch continues exactly where it stopped, and a rank holds a batch of positions,
    never the epoch's draw.

    Attributes:
        blocks: train blocks per source.
        counts: blocks drawn per source each epoch (summing to ``size``).
    """

    blocks: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.blocks) != len(self.counts) or sum(self.counts) != self.size:
            raise ValueError(
                f"a mixed order draws size={self.size} blocks, got counts {list(self.counts)} "
                f"(sum {sum(self.counts)}) for {len(self.blocks)} sources of blocks {list(self.blocks)}"
            )

    def draw(self, epoch: int) -> np.ndarray:
        """The block rows of epoch ``epoch``'s draw, in the mixture's interleaved order (the whole of it: for tests)."""
        return mixture_index(self.blocks, self.counts, self.seed, epoch)

    def order_at(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The block rows at global ``positions`` of ``epoch``: the draw read at the global order's slots.

        O(len(positions)) memory (the loader asks 8 192 positions at a time), whatever the split's size.
        """
        return drawn_rows(super().order_at(epoch, positions), self.blocks, self.counts, self.seed, epoch)

    def digest(self, epoch: int) -> str:
        """A short hash that names the epoch's order: the draw's algorithm, sources, counts, seed, shuffle and rows at spread positions.

        O(1) in the split's size: another seed, shuffle, weight, source size or draw shows in it.
        """
        spread = np.unique(np.linspace(0, max(0, self.size - 1), num=min(self.size, 64), dtype=np.int64))
        rows = self.order_at(epoch, spread)
        head = f"{MIXTURE_ALGORITHM}:{list(self.blocks)}:{list(self.counts)}:{super().digest(epoch)}:"
        return xxhash.xxh3_64_hexdigest(head.encode() + rows.tobytes())

    def shares(self, epoch: int = 0) -> list[float]:
        """Each source's share of the blocks ``epoch`` serves (its whole global batches).

        The draw holds ``counts``; the epoch serves all of it but the slots of its last positions
        that do not fill a global batch (fewer than one global batch: O(global batch) work).
        """
        if self.epoch_samples == 0:
            return [0.0] * len(self.blocks)
        dropped = super().order_at(epoch, np.arange(self.epoch_samples, self.size, dtype=np.int64))
        unserved = np.bincount(interleave(dropped, self.counts)[0], minlength=len(self.counts))
        return [float(c - d) / self.epoch_samples for c, d in zip(self.counts, unserved.tolist())]


def mixed_order(order: GlobalOrder, mixture: Mapping[str, Any]) -> MixedOrder:
    """``order`` (a ``shard`` step's) read through the draw of ``mixture`` (``pack``'s record)."""
    fields = {f.name: getattr(order, f.name) for f in dataclass_fields(GlobalOrder)}
    return MixedOrder(**fields, blocks=tuple(mixture["train_blocks"]), counts=tuple(mixture["drawn_blocks"]))


def mixture_record(
    sources: Sequence[LMSource],
    tokens: Mapping[str, Sequence[int]],
    blocks: Sequence[int],
    block_size: int,
    seed: int,
    tolerance: float,
) -> dict[str, Any]:
    """What ``pack`` records of a mixture (plain data): sources, weights, tokens per source per split, realised shares.

    Args:
        sources: the mixture's sources (their weights normalised: :func:`normalise_sources`).
        tokens: split -> tokens encoded per source.
        blocks: train blocks packed per source.
        block_size: the config's (a block holds ``block_size + 1`` tokens).
        seed: the draw's seed.
        tolerance: the most a realised share may stray from its weight (a fraction).
    """
    total_weight = sum(s.weight for s in sources)
    counts = mixture_counts(blocks, [s.weight for s in sources])
    drawn = sum(counts)
    return {
        "sources": [s.name for s in sources],
        "weights": [s.weight / total_weight for s in sources],
        "tokens": {name: [int(t) for t in values] for name, values in tokens.items()},
        "train_blocks": [int(b) for b in blocks],
        "drawn_blocks": counts,
        "drawn_tokens": [c * (int(block_size) + 1) for c in counts],
        "shares": [c / drawn if drawn else 0.0 for c in counts],
        "seed": int(seed),
        "tolerance": float(tolerance),
    }


def mixture_figure(mixture: Mapping[str, Any]) -> str:
    """One line for ``audit``: each source's weight, realised share and train/validation tokens."""
    parts = []
    for i, name in enumerate(mixture.get("sources", [])):
        tokens = mixture.get("tokens", {})
        train, val = tokens.get("train", [0] * (i + 1))[i], tokens.get("val", [0] * (i + 1))[i]
        parts.append(
            f"{name}: weight {mixture['weights'][i]:.3f}, drawn {mixture['shares'][i]:.3f} of the train tokens "
            f"({train:,} train / {val:,} val tokens encoded)"
        )
    tolerance = mixture.get("tolerance")
    suffix = f" (tolerance ±{float(tolerance) * 100:g} points)" if tolerance is not None else ""
    return "; ".join(parts) + suffix

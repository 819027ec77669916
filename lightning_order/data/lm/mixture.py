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
    "source_config",
    "sources_identity",
]

#: The column that holds each document's source index (only in a mixture's partitions).
SOURCE_COLUMN = "source"


@dataclass(frozen=True)
class LMSource:
    """One source of a mixture: its files, its weight in the train tokens, and a name.

    Attributes:
        path: a path, a glob, a folder or a list of them (``~`` and ``$VAR`` expanded), as
            ``data_files``.
        weight: its share of the train tokens, relative to the other sources' (normalised to sum to 1).
        name: how the ledger and ``audit`` name it (default: ``path`` when it is one string, else
            ``source-<i>``).
        dataset: the ``datasets`` builder that reads its files (``"text"``, ``"json"``, ``"csv"``,
            ``"parquet"``).
    """

    path: str | list[str]
    weight: float
    name: str | None = None
    dataset: str = "text"


def _as_source(item: Any, index: int) -> LMSource:
    if isinstance(item, LMSource):
        return item
    if isinstance(item, Mapping):
        unknown = set(item) - {"path", "weight", "name", "dataset"}
        if unknown or "path" not in item or "weight" not in item:
            raise DataError(
                f"source {index} must give path and weight (and optionally name, dataset), got {dict(item)!r}; "
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

    Raises:
        DataError: no source, a weight that is not a positive finite number, a path that is not a
            string or a list of strings, or two sources of one name.
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
    out = []
    for i, item in enumerate(items):
        source = _as_source(item, i)
        weight = source.weight
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight <= 0
        ):
            raise DataError(
                f"the weight of source {i} ({source.path!r}) must be a positive number, got {weight!r}; "
                "e.g. weight=0.7",
                step="load",
            )
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
        out.append(replace(source, name=name, weight=float(weight)))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise DataError(f"two sources share a name ({names}); give each a distinct name", step="load")
    return tuple(out)


def source_config(cfg: Any, source: LMSource) -> Any:
    """``cfg`` as the single-source config that reads ``source``'s files."""
    return replace(cfg, sources=None, dataset=source.dataset, data_files=source.path)


def sources_identity(cfg: Any) -> list[dict[str, Any]]:
    """Each source's name, builder, weight and files' identity (content hashes): the mixture's cache identity."""
    out = []
    for source in cfg.source_list:
        sub = source_config(cfg, source)
        out.append(
            {
                "name": source.name,
                "dataset": source.dataset,
                "weight": source.weight,
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
        found, info = read_input(source_config(cfg, source), work / f"source-{i:03d}", engine)
        chunks.extend(replace(c, index=len(chunks) + j, origin=i) for j, c in enumerate(found.sources))
        rows += found.rows
        text_bytes += found.text_bytes
        nulls += int(info["null_rows"])
        per_source.append(found.rows)
    return Chunks(tuple(chunks), rows, text_bytes), {"null_rows": nulls, "source_rows": per_source}


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
    width: int,
    seed: int,
    tolerance: float,
) -> dict[str, Any]:
    """What ``pack`` records of a mixture (plain data): sources, weights, tokens per source per split, realised shares.

    Args:
        sources: the mixture's sources.
        tokens: split -> tokens encoded per source.
        blocks: train blocks packed per source.
        width: tokens per block (``block_size + 1``).
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
        "drawn_tokens": [c * int(width) for c in counts],
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

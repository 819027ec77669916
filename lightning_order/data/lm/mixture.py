"""Weighted mixtures of several sources: the sources as declared, read, and the draw of train blocks by weight.

A mixture is several sources (:class:`LMSource`: files and a weight), read by ``load`` into one
corpus whose every document keeps the index of its source (a ``source`` column), cleaned and
deduplicated *together* (a near-duplicate across sources is one document), split by each
document's hash (so each source is split at ``val_fraction``), encoded and packed *per source*
(``split`` writes each source's documents to files of their own: a block never spans two sources).

The weights act on the train order only: :func:`mixture_index` draws, from each source's range of
train blocks, as many blocks as its weight asks of the split's total (a seeded permutation of the
source's blocks, repeated when it must be upsampled, cut when downsampled), interleaved so every
prefix of the order holds the sources near their weights. The global order
(:mod:`lightning_order.positions`) then serves that index like any train split, so batches, ranks
and the exact mid-epoch resume are unchanged. The trade-off: the draw is fixed by the seed, so a
downsampled source serves the same subset of its blocks every epoch (in another order each epoch
with ``shuffle``); its other blocks are never served.

Plain data and numpy only; :func:`mixture_record` is what ``pack`` records and the
``mixture-off-weight`` check (:mod:`lightning_order.checks.mixture`) reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.errors import DataError

__all__ = [
    "MIXTURE_SEED",
    "SOURCE_COLUMN",
    "LMSource",
    "mixture_counts",
    "mixture_figure",
    "mixture_index",
    "mixture_record",
    "normalise_sources",
    "read_sources",
    "source_config",
    "sources_identity",
]

#: The column that holds each document's source index (only in a mixture's partitions).
SOURCE_COLUMN = "source"
#: Salts the seed of the draw, so it never repeats the shuffle's own permutation.
MIXTURE_SEED = 0x3D1C


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
    for source in cfg.sources:
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


def read_sources(cfg: Any, work: Path) -> tuple[Any, dict[str, Any]]:
    """Every source's documents as one :class:`~.documents.Chunks`, each chunk tagged with its source's index.

    Each source is read as a single-source config would read it (``max_documents`` per source);
    its chunks follow the previous source's, so the corpus order is source by source.

    Returns:
        ``(chunks, info)``: ``info`` holds ``null_rows`` and ``source_rows`` (rows read per source).
    """
    from lightning_order.data.lm.documents import Chunks, read_input

    chunks: list[Any] = []
    rows, text_bytes, nulls, per_source = 0, 0, 0, []
    for i, source in enumerate(cfg.sources):
        found, info = read_input(source_config(cfg, source), work / f"source-{i:03d}")
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


def mixture_index(blocks: Sequence[int], counts: Sequence[int], seed: int) -> np.ndarray:
    """The mixed train order's block rows (int64): ``counts[s]`` of source ``s``'s range, interleaved by weight.

    Source ``s`` owns rows ``[sum(blocks[:s]), sum(blocks[:s+1]))`` of the train block file. Its
    draw is a seeded permutation of its rows, repeated whole while ``counts[s]`` exceeds them,
    and the first rows of one more permutation for the rest. The sources are interleaved by the
    place of each draw in its own sequence (``(k + 0.5) / counts[s]``), so every prefix holds
    each source close to its share.
    """
    starts = np.concatenate([[0], np.cumsum(np.asarray(blocks, dtype=np.int64))])
    rows, keys, owners = [], [], []
    for s, (size, count) in enumerate(zip(blocks, counts)):
        if count == 0 or size == 0:
            continue
        rng = np.random.Generator(np.random.PCG64([int(seed) & ((1 << 64) - 1), MIXTURE_SEED, s]))
        passes = -(-int(count) // int(size))
        drawn = np.concatenate([rng.permutation(int(size)) for _ in range(passes)])[: int(count)]
        rows.append(drawn.astype(np.int64) + starts[s])
        keys.append((np.arange(count, dtype=np.float64) + 0.5) / count)
        owners.append(np.full(count, s, dtype=np.int64))
    if not rows:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((np.concatenate(owners), np.concatenate(keys)))
    return np.concatenate(rows)[order]


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

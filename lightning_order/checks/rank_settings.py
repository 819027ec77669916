"""``rank-mismatch`` that names what differs: a datamodule setting, or the items' shape.

When one rank runs with another ``block_size`` (a per-rank config, an environment variable
read in ``__init__``), its items have another length and no item is the same as on the other
ranks; the generic finding would blame the split (``random_split`` without a generator). This
check runs first and names the field instead: a plain datamodule setting whose value differs
(``block_size: rank 0: 32, rank 1: 64``), else the item key whose shape differs. Pure
functions of the gathered summaries (see :mod:`lightning_order.checks.datasets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning_order.rules import Violation

__all__ = ["check_rank_settings"]

_NAMES = {"train": "train", "val": "validation"}


def _per_rank(values: dict[int, Any]) -> str:
    return ", ".join(f"rank {r}: {v!r}" for r, v in values.items())


def check_rank_settings(summaries: Sequence[Mapping[str, Any]], ranks: list[int]) -> list[Violation]:
    """``rank-mismatch`` naming the datamodule settings, else the item shapes, that differ per rank.

    Args:
        summaries: one content summary per rank: ``settings`` (the datamodule's plain settings)
            and ``train`` / ``val`` split summaries with ``shapes`` (``{leaf: shape}`` of an item).
        ranks: the rank of each summary.

    Returns:
        One violation, or nothing when every rank has the same settings and item shapes.
    """
    settings = [s.get("settings") or {} for s in summaries]
    names = sorted(set.intersection(*(set(s) for s in settings))) if settings else []
    differing = {n: {r: s[n] for r, s in zip(ranks, settings)} for n in names}
    differing = {n: v for n, v in differing.items() if len({repr(x) for x in v.values()}) > 1}
    if differing:
        shown = "; ".join(f"{name} ({_per_rank(values)})" for name, values in differing.items())
        fields = ", ".join(differing)
        return [
            Violation(
                "rank-mismatch",
                ("encode", "shard"),
                f"the datamodule's settings differ between ranks: {shown}: each rank prepares other "
                f"data (another window length, another tokenizer file), so the ranks train on "
                "mismatched batches",
                fix=f"give every rank the same {fields}: pass it as one value (the config file or the "
                "command line), never from a per-rank source (an environment variable, LOCAL_RANK, a "
                "file each rank writes)",
                details={"item": "settings", "fields": list(differing), "values": differing},
            )
        ]
    for split in ("val", "train"):
        shapes: dict[int, dict[str, Any]] = {
            r: (s.get(split) or {}).get("shapes") or {} for r, s in zip(ranks, summaries)
        }
        if any(not v for v in shapes.values()) or len({repr(v) for v in shapes.values()}) < 2:
            continue
        keys = [k for k in shapes[ranks[0]] if len({repr(v.get(k)) for v in shapes.values()}) > 1]
        shown = "; ".join(f"{k} ({_per_rank({r: v.get(k) for r, v in shapes.items()})})" for k in keys)
        return [
            Violation(
                "rank-mismatch",
                ("encode", "shard"),
                f"the ranks' {_NAMES[split]} items have different shapes: {shown}: a length setting "
                "(block_size, max_length, sequence length) differs between ranks",
                fix="give every rank the same block size / max_length: pass it as one value (the config "
                "file or the command line), never from a per-rank source (an environment variable, "
                "LOCAL_RANK)",
                details={"item": f"{split}-shapes", "keys": keys, "shapes": shapes},
            )
        ]
    return []

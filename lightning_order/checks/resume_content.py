"""Resume onto changed data with no ledger: the tokenizer and a content sample of each split.

A hand-written datamodule keeps no fingerprints, so the validator stores what it can read with no
glue (:mod:`lightning_order.callbacks.validator.resume`): the tokenizer's content
fingerprint and, per split, the dataset's length and the hashes of a few hundred items at fixed
indices. Data re-tokenized with another tokenizer of the same size loads into the same
embedding table without an error; its token ids mean other text, so the weights learn over again
what they knew (``resume-data-changed``).

A content sample holds:

- ``tokenizer``: the tokenizer's fingerprint, or ``None`` when the datamodule exposes none;
- ``splits``: ``{"train": {"length": n, "hashes": [...]}, "val": ...}``, the hashes of the items
  at the indices :func:`sample_indices` picks for that length;
- ``same_on_ranks``: whether every rank held the same sample (one dataset on every rank); when
  not (each rank keeps its own shard), only a rank of the saving rank's data-parallel rank, in a run
  of the same data-parallel size, compares the splits;
- ``data_parallel``: ``{"size", "rank"}`` of the rank that took it;
- ``item_hashes``: the item hash scheme (absent before #48 changed it): hashes of another scheme
  are not compared, the lengths are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_order.rules import Violation

__all__ = ["SAMPLE_ITEMS", "check_resume_content", "sample_indices"]

#: Items hashed per split.
SAMPLE_ITEMS = 256

_FIX = (
    "resume on the data the checkpoint was trained on (the same tokenizer.json and the files it "
    "encoded), or, to train these weights on the new data on purpose, load them as a new run's "
    "starting point (model.load_state_dict, no ckpt_path) and resize or remap the embedding rows"
)


def sample_indices(length: int, count: int = SAMPLE_ITEMS) -> list[int]:
    """The fixed indices sampled from a split of ``length`` items (the same for the same length)."""
    if length <= count:
        return list(range(length))
    return [int(i) for i in np.sort(np.random.default_rng(0).choice(length, size=count, replace=False))]


def _split_changes(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, str]]:
    changes = []
    for split, before in (stored.get("splits") or {}).items():
        after = (current.get("splits") or {}).get(split)
        if not isinstance(before, Mapping) or not isinstance(after, Mapping):
            continue
        if int(before["length"]) != int(after["length"]):
            changes.append(
                (split, f"the {split} split holds {after['length']} items, {before['length']} before")
            )
            continue
        if stored.get("item_hashes") != current.get("item_hashes"):
            continue  # hashed by another scheme (a checkpoint of an older version): lengths only
        differ = sum(a != b for a, b in zip(before["hashes"], after["hashes"]))
        if differ:
            count = len(before["hashes"])
            changes.append((split, f"{differ} of {count} sampled {split} items differ"))
    return changes


def _comparable(stored: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether this rank's splits can be compared with the stored ones (see the module docstring)."""
    if stored.get("same_on_ranks") and current.get("same_on_ranks"):
        return True
    before, after = stored.get("data_parallel") or {}, current.get("data_parallel") or {}
    return before.get("size") == after.get("size") and before.get("rank") == after.get("rank")


def check_resume_content(
    stored: Mapping[str, Any] | None, current: Mapping[str, Any] | None
) -> list[Violation]:
    """``resume-data-changed``: the tokenizer or a split's sampled content differs from the checkpoint's.

    Args:
        stored: the content sample saved with the checkpoint (``None``: an older checkpoint).
        current: this rank's content sample.

    Returns:
        One violation naming what changed (the tokenizer, which split), or nothing.
    """
    if not stored or not current:
        return []
    changes: list[tuple[str, str]] = []
    before, after = stored.get("tokenizer"), current.get("tokenizer")
    if before and after and before != after:
        changes.append(("tokenizer", f"the tokenizer changed ({str(before)[:12]} -> {str(after)[:12]})"))
    if _comparable(stored, current):
        changes += _split_changes(stored, current)
    if not changes:
        return []
    steps = ("build_vocab", "encode") if changes[0][0] == "tokenizer" else ("encode",)
    return [
        Violation(
            "resume-data-changed",
            steps,
            "the checkpoint was trained on other data than this run's: "
            + "; ".join(text for _, text in changes)
            + " (no ledger: compared by content)",
            symptom="the weights read token ids and rows that mean something else now: the loss jumps "
            "at the resumed step and the run relearns what it knew",
            fix=_FIX,
            details={"changed": [what for what, _ in changes]},
        )
    ]

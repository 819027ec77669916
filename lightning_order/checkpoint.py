"""Reading checkpoints without running code from them, and writing our entries as plain data.

A checkpoint is a pickle, and unpickling a stranger's pickle runs whatever it names. Every
checkpoint this package reads (the validator's resume check, ``recover()``, ``audit``) goes
through :func:`load_checkpoint`, which is ``torch.load(..., weights_only=True)``: tensors,
numbers, strings, lists, tuples and dicts come back, anything else is refused before any of it
runs. What our callbacks and the pause write is therefore plain data (:func:`plain`), so our own
checkpoints always load this way. Nothing here imports a class a checkpoint names.

A distributed checkpoint (Lightning's ``ModelParallelStrategy`` / FSDP with sharded state) is a
folder: the weight and optimizer shards (``*.distcp`` and their index ``.metadata``, written by
``torch.distributed.checkpoint``) and ``meta.pt`` (everything else: loops, callback states, our
entry). Nothing in the format ties ``meta.pt`` to the shards beside it, so a folder mixing two runs
resumes one run's weights under the other's data fingerprints and position. :func:`tie_shards`
records, in ``meta.pt``, a digest of the shards written with it (the index's bytes, which hold
the save's own random id, and every shard's name and size); :func:`read_sharded_meta` refuses a
folder whose shards are no longer the ones recorded. The trade-off: ``meta.pt`` is written twice
per save (it holds no weights: kilobytes), instead of hashing the weights themselves.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import sys
from collections.abc import Mapping
from os import PathLike
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import xxhash

from lightning_order.errors import CheckpointError
from lightning_order.ledger import CHECKPOINT_KEY

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # torch is imported where a checkpoint is read: `audit` of manifests needs none
    import torch

__all__ = [
    "SHARDED_META",
    "early_checkpoint",
    "is_sharded_checkpoint",
    "load_checkpoint",
    "plain",
    "read_sharded_meta",
    "shards_digest",
    "tie_shards",
    "unreadable_checkpoint",
]

#: The file of a distributed checkpoint folder that holds all but the shards (Lightning's name for it).
SHARDED_META = "meta.pt"
#: The shards' index, written by ``torch.distributed.checkpoint`` (it names the save by a random id).
_SHARDS_INDEX = ".metadata"
#: The suffix of the shard files ``torch.distributed.checkpoint``'s file system writer writes.
_SHARD_SUFFIX = ".distcp"
#: Where in our entry of ``meta.pt`` the digest of its shards is kept.
_TIE = "shards"
#: A key every checkpoint Lightning writes holds (``meta.pt`` included): a file without it is foreign.
_LIGHTNING_KEY = "pytorch-lightning_version"


def early_checkpoint(path: str | PathLike[str] | None) -> dict[str, Any] | None:
    """The checkpoint a fit will resume from, read before Lightning restores it, where it can be.

    Args:
        path: ``trainer.ckpt_path`` (``"last"``, ``"best"``, a URL or ``None`` are left to the
            restore: ``None`` here); a distributed checkpoint folder gives its ``meta.pt``.

    Returns:
        The checkpoint (plain data and tensors only), or ``None``: no local file, or one that holds
        more than plain data (never unpickled here; Lightning's own load decides on it).

    Raises:
        CheckpointError: the file is empty, truncated or not a checkpoint (``unreadable``); a
            folder's ``meta.pt`` is foreign or not the one written with its shards.
    """
    if not path or not (os.path.isfile(path) or is_sharded_checkpoint(path)):
        return None
    try:
        return read_sharded_meta(path) if is_sharded_checkpoint(path) else load_checkpoint(path)
    except CheckpointError as err:
        if getattr(err, "unreadable", False):
            raise
        log.debug("resume check deferred to the weight restore (%s)", err)
        return None


def load_checkpoint(path: str | PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint at ``path``, loaded with ``weights_only=True`` (no code from it runs).

    Args:
        path: a checkpoint file.
        map_location: where tensors go.

    Raises:
        CheckpointError: the file is missing, empty, truncated or not a checkpoint (one line:
            the file and what is wrong), or it holds objects other than plain data and tensors
            (it may try to run code; the message names what it refers to and the fix).
    """
    import torch

    try:
        checkpoint = torch.load(str(path), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL (\S+)", str(err))
        if named is None and "weights_only" not in str(err).lower() and "unsupported" not in str(err).lower():
            raise unreadable_checkpoint(path, err) from None
        raise CheckpointError(
            f"refused to load checkpoint {path}: it holds more than tensors and plain data"
            f"{f' (it names {named.group(1)})' if named else ''}, and unpickling it could run code; "
            "lightning_order reads checkpoints with weights_only=True only. Fix: load it only if you "
            "trust its source, and re-save its state_dict and plain entries"
        ) from None
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        AttributeError,
        TypeError,
        IndexError,
        KeyError,
    ) as err:
        raise unreadable_checkpoint(path, err) from None
    if not isinstance(checkpoint, Mapping):
        error = CheckpointError(
            f"{path} is not a Lightning checkpoint: expected a dict, got {type(checkpoint).__name__}"
        )
        error.unreadable = True  # type: ignore[attr-defined]  # nothing Lightning could restore either
        raise error
    return dict(checkpoint)


def unreadable_checkpoint(path: str | PathLike[str], err: BaseException) -> CheckpointError:
    """The one line for a checkpoint that cannot be read: the file and what is wrong with it."""
    try:
        size = os.path.getsize(path)
    except OSError:
        error = CheckpointError(
            f"checkpoint {path} does not exist (or cannot be opened): pass the path of a .ckpt file"
        )
        error.unreadable = True  # type: ignore[attr-defined]
        return error
    if size == 0:
        what = "is empty (0 bytes)"
    else:
        what = f"is not a readable checkpoint ({size} bytes; {type(err).__name__}: {str(err).strip().splitlines()[0][:120] if str(err).strip() else 'no detail'})"
    error = CheckpointError(
        f"checkpoint {path} {what}: it is truncated, damaged or not a torch checkpoint; use an intact copy, "
        "or the previous checkpoint of the run"
    )
    error.unreadable = True  # type: ignore[attr-defined]  # not an unsafe one: nothing to defer to Lightning
    return error


def plain(value: Any) -> Any:
    """``value`` as plain data that ``weights_only`` loading accepts (and JSON, but for tensors).

    Mappings become dicts with string keys, sequences lists, paths strings, numpy and torch
    scalars Python numbers; tensors stay tensors. Anything else becomes its ``repr`` (a record,
    never an object to rebuild).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    torch = sys.modules.get("torch")  # no tensor exists before torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [plain(v) for v in items]
    if isinstance(value, (PurePath, PathLike)):
        return str(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return plain(item())
    return repr(value)


def is_sharded_checkpoint(path: str | PathLike[str] | None) -> bool:
    """Whether ``path`` is a distributed checkpoint folder (a folder holding :data:`SHARDED_META`)."""
    return bool(path) and os.path.isdir(path) and os.path.exists(os.path.join(path, SHARDED_META))  # type: ignore[arg-type]


def shards_digest(folder: str | PathLike[str]) -> str:
    """A digest of the shards in a distributed checkpoint folder: their index's bytes, each shard's name and size.

    The index holds the save's own random id, so two saves of the same model differ; a shard
    replaced, truncated or removed changes a size or a name. Reads the index only (kilobytes),
    never the shards.
    """
    folder = Path(folder)
    digest = xxhash.xxh3_64()
    index = folder / _SHARDS_INDEX
    digest.update(index.read_bytes() if index.is_file() else b"")
    for entry in sorted(folder.glob(f"*{_SHARD_SUFFIX}")):  # any other file a user puts there is no shard
        digest.update(f"\0{entry.name}\0{entry.stat().st_size}".encode())
    return digest.hexdigest()


def tie_shards(meta: dict[str, Any], folder: str | PathLike[str]) -> None:
    """Rewrites ``folder``'s ``meta.pt`` as ``meta`` with the digest of the shards beside it (one process).

    Called once the save wrote both (``meta`` is what it wrote to ``meta.pt``); the file is
    replaced atomically, so a crash leaves the untied ``meta.pt``, never half of one.
    """
    import torch

    entry = meta.setdefault(CHECKPOINT_KEY, {})
    entry[_TIE] = shards_digest(folder)
    target = Path(folder) / SHARDED_META
    partial = target.with_name(f".{SHARDED_META}.{os.getpid()}.tmp")
    torch.save(meta, partial)
    os.replace(partial, target)


def read_sharded_meta(folder: str | PathLike[str]) -> dict[str, Any]:
    """The ``meta.pt`` of a distributed checkpoint folder, refused unless it was written with the shards beside it.

    Args:
        folder: the checkpoint folder.

    Returns:
        ``meta.pt`` as plain data and tensors (``weights_only=True``).

    Raises:
        CheckpointError: one line: ``meta.pt`` is truncated, empty or not a checkpoint
            (``unreadable``), holds more than plain data, was not written by Lightning (a foreign
            file), or records shards other than the folder's (copied from another checkpoint,
            or the shards replaced).
    """
    path = Path(folder) / SHARDED_META
    meta = load_checkpoint(path)
    if _LIGHTNING_KEY not in meta:
        error = CheckpointError(
            f"{path} is no Lightning checkpoint's {SHARDED_META} (it holds {', '.join(map(repr, list(meta)[:5])) or 'nothing'} "
            f"and no {_LIGHTNING_KEY!r}): the folder's {SHARDED_META} was replaced by another file; use an intact "
            "checkpoint folder, or the previous checkpoint of the run"
        )
        error.unreadable = True  # type: ignore[attr-defined]
        raise error
    recorded = (meta.get(CHECKPOINT_KEY) or {}).get(_TIE)
    if recorded is not None and str(recorded) != shards_digest(folder):
        error = CheckpointError(
            f"{path} was not written with the shards beside it (it records shards {str(recorded)[:12]}, the folder "
            f"holds {shards_digest(folder)[:12]}): the folder mixes two checkpoints ({SHARDED_META} or the .distcp "
            "shards copied from another one), and resuming it would load one run's weights under another's data "
            "and position; use a checkpoint folder as its save wrote it"
        )
        error.unreadable = True  # type: ignore[attr-defined]  # refused here: nothing to defer to Lightning
        raise error
    return meta

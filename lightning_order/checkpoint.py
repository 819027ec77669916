"""Reading checkpoints without running code from them, and writing our entries as plain data.

A checkpoint is a pickle, and unpickling a stranger's pickle runs whatever it names. Every
checkpoint this package reads (the validator's resume check, ``recover()``, ``audit``) goes
through :func:`load_checkpoint`, which is ``torch.load(..., weights_only=True)``: tensors,
numbers, strings, lists, tuples and dicts come back, anything else is refused before any of it
runs. What our callbacks and the pause write is therefore plain data (:func:`plain`), so our own
checkpoints always load this way. Nothing here imports a class a checkpoint names.
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
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from lightning_order.errors import CheckpointError

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # torch is imported where a checkpoint is read: `audit` of manifests needs none
    import torch

__all__ = ["early_checkpoint", "load_checkpoint", "plain", "unreadable_checkpoint"]


def early_checkpoint(path: str | PathLike[str] | None) -> dict[str, Any] | None:
    """The checkpoint a fit will resume from, read before Lightning restores it, where it can be.

    Args:
        path: ``trainer.ckpt_path`` (``"last"``, ``"best"``, a URL or ``None`` are left to the
            restore: ``None`` here).

    Returns:
        The checkpoint (plain data and tensors only), or ``None``: no local file, or one that holds
        more than plain data (never unpickled here; Lightning's own load decides on it).

    Raises:
        CheckpointError: the file is empty, truncated or not a checkpoint (``unreadable``).
    """
    if not path or not os.path.isfile(path):
        return None
    try:
        return load_checkpoint(path)
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
        raise CheckpointError(
            f"{path} is not a Lightning checkpoint: expected a dict, got {type(checkpoint).__name__}"
        )
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

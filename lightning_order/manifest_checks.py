"""What a manifest must be before a :class:`~lightning_order.ledger.StepLedger` is built from it.

A regular file: a FIFO or a device named ``manifest.json`` would hang its reader or feed it
without end, so it is opened without blocking and refused unless the open handle is a regular
file. Records of the recorded types: a manifest's checksum proves that nobody edited it since it was written, not that whoever wrote
it wrote sensible records: a re-sealed manifest (or a checkpoint's ledger) can hold a record that
is a number, a ``step`` that is ``None`` or ``inputs`` that are a list. Every reader (``audit``,
``graph``, the cache, the validator) would then fail deep inside with a raw ``AttributeError`` or
``TypeError``. These checks refuse such data once, where it is read, with a
:class:`~lightning_order.errors.ManifestError` naming the record and the field.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_order.errors import ManifestError

__all__ = ["check_ledger_state", "check_record", "file_kind", "read_manifest_text"]

_TEXT = (str,)
_TEXT_OR_NONE = (str, type(None))
_NUMBER = (int, float)
# field -> (accepted types, what to call them in a message); ``step`` and ``seq`` are required.
_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "step": (_TEXT, "a string"),
    "seq": ((int,), "an integer"),
    "inputs": ((dict,), "a mapping of step names to fingerprints"),
    "output": (_TEXT_OR_NONE, "a string or null"),
    "fitted_on": (_TEXT_OR_NONE, "a string or null"),
    "parts": ((dict,), "a mapping of part names to fingerprints"),
    "params": ((dict,), "a mapping"),
    "stats": ((dict,), "a mapping"),
    "rank": ((int,), "an integer"),
    "version": (_TEXT, "a string"),
    "time": (_NUMBER, "a number"),
    "meta": ((dict,), "a mapping"),
}
_FINGERPRINT_MAPS = ("inputs", "parts")


def check_record(data: Any, index: int) -> None:
    """Refuses a ledger record whose fields are not of the types :class:`~lightning_order.ledger.StepRecord` holds.

    Args:
        data: the record as read (from JSON or a checkpoint).
        index: its position in the ledger, named in the message.

    Raises:
        ManifestError: ``data`` is not a mapping, lacks ``step`` or ``seq``, or a field has the
            wrong type (``seq`` and ``rank`` must be integers, not booleans).
    """
    if not isinstance(data, Mapping):
        raise ManifestError(f"ledger record {index} is not a mapping of fields (got {type(data).__name__})")
    missing = [name for name in ("step", "seq") if name not in data]
    if missing:
        raise ManifestError(
            f"ledger record {index} needs 'step' and 'seq', got keys {sorted(map(str, data))}"
        )
    for name, (types, described) in _FIELDS.items():
        if name not in data:
            continue
        value = data[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ManifestError(
                f"ledger record {index} ('{data['step']}'): field {name!r} must be {described}, "
                f"got {type(value).__name__}"
            )
    for name in _FINGERPRINT_MAPS:
        odd = [key for key, value in data.get(name, {}).items() if not isinstance(value, str)]
        if odd:
            raise ManifestError(
                f"ledger record {index} ('{data['step']}'): {name}[{odd[0]!r}] must be a fingerprint "
                "(a string)"
            )


def check_ledger_state(state: Any) -> None:
    """Refuses a ledger state whose ``records`` are not a list of records or whose ``info`` is no mapping.

    Raises:
        ManifestError: naming the first field or record that is wrong.
    """
    if not isinstance(state, Mapping):
        raise ManifestError(f"a ledger state must be a mapping, got {type(state).__name__}")
    records = state.get("records", [])
    if not isinstance(records, list):
        raise ManifestError(f"the ledger's 'records' must be a list, got {type(records).__name__}")
    info = state.get("info", {})
    if not isinstance(info, Mapping):
        raise ManifestError(f"the ledger's 'info' must be a mapping, got {type(info).__name__}")
    for index, record in enumerate(records):
        check_record(record, index)


def read_manifest_text(source: Path) -> str:
    """The text of the manifest at ``source``, refused unless it is a regular file.

    Opened without blocking and checked on the open handle (no window between a check and the
    read): a FIFO (or a device) named ``manifest.json`` would otherwise hang the reader.

    Raises:
        ManifestError: ``source`` is missing, unreadable, not a regular file, or not UTF-8 text.
    """
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as err:
        raise ManifestError(f"no ledger manifest at {source}") from err
    except OSError as err:
        raise ManifestError(f"the manifest {source} cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ManifestError(f"{source} is {file_kind(mode)}, not a regular file: not a ledger manifest")
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{source} is not a ledger manifest (not UTF-8 text)") from None


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for a message: "a FIFO", "a folder", "a device", ..."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"))
    kinds += ((stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISREG, "a regular file"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")

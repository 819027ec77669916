"""The ledger of executed steps, their fingerprints, and the JSON manifest that stores them.

Like a build system, we judge a pipeline by what really ran: every executed step appends a
:class:`StepRecord` (its inputs' fingerprints, its output's fingerprint, what a fitted step learned
from). A fingerprint is a hash chain (xxhash, 128 bits, hex: safe as a file name) of the step's
name, version, non-default parameters in sorted order and its inputs' fingerprints; callers pass a
content hash as ``output`` where one is cheap. The manifest is written atomically (temp file, then
``os.replace``) and carries a checksum, so a truncated or edited manifest is an error on load,
never a silent pass.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from lightning_order.errors import ManifestError
from lightning_order.manifest_checks import check_ledger_state, read_manifest_text

__all__ = ["CHECKPOINT_KEY", "MANIFEST_NAME", "StepLedger", "StepRecord", "fingerprint", "step_fingerprint"]

MANIFEST_NAME = "manifest.json"
#: The checkpoint entry where the ledger and the data's fingerprints travel (the validator writes
#: them at every save; a pause adds its diagnosis and waste report to the same entry).
CHECKPOINT_KEY = "lightning_order"
_FORMAT = "lightning_order.manifest"
_FORMAT_VERSION = 1


def _canonical(value: Any) -> Any:
    """Turns ``value`` into plain JSON data with a stable form (sorted keys, lists for tuples)."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical(v) for v in value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return repr(value)
        return value
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _canonical(value.item())
    return repr(value)


def _dumps(value: Any) -> str:
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(*parts: Any) -> str:
    """Hashes plain data into a 32-character hex fingerprint (xxh3, 128 bits).

    Args:
        *parts: JSON-like values (dicts are hashed with sorted keys, so order does not matter).

    Returns:
        A lowercase hex digest, safe as a file name.
    """
    return xxhash.xxh3_128_hexdigest(_dumps(list(parts)).encode("utf-8"))


def step_fingerprint(
    step: str,
    *,
    version: str = "1",
    params: Mapping[str, Any] | None = None,
    inputs: Mapping[str, str] | None = None,
) -> str:
    """The hash-chain fingerprint of a step: its name, version, parameters and inputs' fingerprints.

    Args:
        step: the step's name.
        version: bump it when the step's code changes meaning, so old caches are not reused.
        params: the step's non-default parameters (order does not matter).
        inputs: the fingerprints of the step's inputs, by name.
    """
    return fingerprint("step", step, str(version), dict(params or {}), dict(inputs or {}))


@dataclass(frozen=True)
class StepRecord:
    """One executed step, as the ledger saw it.

    Attributes:
        step: the step's name.
        seq: its position in the ledger (0, 1, 2, ...).
        inputs: the fingerprints it consumed, by producing step's name.
        output: the fingerprint of what it produced.
        fitted_on: for fitted steps, the fingerprint of the data it learned from.
        parts: for partition steps, the fingerprint of each part (``{"train": ..., "val": ...}``).
        params: the parameters that shaped it.
        stats: summary statistics (row counts, vocab size, ...); not part of any fingerprint.
        rank: the global rank of the process that ran it.
        version: the step implementation's version.
        time: when it ran (seconds since the epoch); not part of any fingerprint.
        meta: anything else the caller attached.
    """

    step: str
    seq: int
    inputs: dict[str, str] = field(default_factory=dict)
    output: str | None = None
    fitted_on: str | None = None
    parts: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    rank: int = 0
    version: str = "1"
    time: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON data."""
        plain: dict[str, Any] = _canonical(asdict(self))
        return plain

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepRecord:
        """Rebuilds a record from :meth:`to_dict` output; unknown keys go to ``meta``."""
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        if "step" not in kwargs or "seq" not in kwargs:
            raise ManifestError(f"a ledger record needs 'step' and 'seq', got keys {sorted(data)}")
        if extra:
            kwargs["meta"] = {**kwargs.get("meta", {}), **extra}
        return cls(**kwargs)

    @property
    def produced(self) -> set[str]:
        """Every fingerprint this record produced: its output and each of its parts."""
        values = set(self.parts.values())
        if self.output is not None:
            values.add(self.output)
        return values

    def _identity(self) -> dict[str, Any]:
        # What the whole-ledger fingerprint hashes: no time, rank or stats, so that ranks which
        # did the same work agree, and a re-run that did the same work gets the same fingerprint.
        return {
            "step": self.step,
            "inputs": self.inputs,
            "output": self.output,
            "fitted_on": self.fitted_on,
            "parts": self.parts,
            "params": self.params,
            "version": self.version,
        }


class StepLedger:
    """An append-only record of the steps that ran, in the order they ran.

    Examples:
        >>> ledger = StepLedger()
        >>> load = ledger.record("load", params={"dataset": "demo"})
        >>> clean = ledger.record("clean", inputs={"load": load.output})
        >>> [r.step for r in ledger]
        ['load', 'clean']

    Args:
        records: records to start from (e.g. read from a manifest).
        info: ledger-level facts saved with the manifest (dims, the cache's fingerprint, ...).
        rank: the rank stamped on new records when ``record`` is not given one.
    """

    def __init__(
        self,
        records: list[StepRecord] | None = None,
        info: Mapping[str, Any] | None = None,
        rank: int = 0,
    ) -> None:
        self._records: list[StepRecord] = list(records or [])
        self.info: dict[str, Any] = dict(info or {})
        self.rank = rank

    # -- recording -------------------------------------------------------------------------
    def record(
        self,
        step: str,
        *,
        inputs: Mapping[str, str | None] | None = None,
        output: str | None = None,
        fitted_on: str | None = None,
        parts: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
        rank: int | None = None,
        version: str = "1",
        **meta: Any,
    ) -> StepRecord:
        """Appends a record of ``step`` and returns it.

        Args:
            step: the step's name.
            inputs: fingerprints consumed, by producing step (``None`` values are dropped).
            output: the output's fingerprint; by default the hash chain of name, version,
                params and inputs.
            fitted_on: for a fitted step, the fingerprint of the data it learned from.
            parts: for a partition step, the fingerprint of each part.
            params: parameters that shaped the step.
            stats: summary statistics, not hashed.
            rank: the process rank; defaults to the ledger's.
            version: the step implementation's version.
            **meta: anything else worth keeping in the manifest.
        """
        clean_inputs = {str(k): str(v) for k, v in (inputs or {}).items() if v is not None}
        clean_params = _canonical(dict(params or {}))
        if output is None:
            output = step_fingerprint(step, version=version, params=clean_params, inputs=clean_inputs)
        record = StepRecord(
            step=step,
            seq=len(self._records),
            inputs=clean_inputs,
            output=output,
            fitted_on=fitted_on,
            parts={str(k): str(v) for k, v in (parts or {}).items()},
            params=clean_params,
            stats=_canonical(dict(stats or {})),
            rank=self.rank if rank is None else int(rank),
            version=str(version),
            time=time.time(),
            meta=_canonical(dict(meta)),
        )
        self._records.append(record)
        return record

    # -- reading ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> StepRecord:
        return self._records[index]

    def __repr__(self) -> str:
        return f"StepLedger({' -> '.join(r.step for r in self._records) or 'empty'})"

    @property
    def records(self) -> list[StepRecord]:
        """A copy of the records, in order."""
        return list(self._records)

    def steps(self) -> list[str]:
        """The names of the executed steps, in order (repeats included)."""
        return [r.step for r in self._records]

    def latest(self, step: str) -> StepRecord | None:
        """The most recent record of ``step``, or ``None`` when it never ran."""
        for record in reversed(self._records):
            if record.step == step:
                return record
        return None

    def has(self, step: str) -> bool:
        """Whether ``step`` ran at least once."""
        return self.latest(step) is not None

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the whole ledger (times, ranks and stats excluded)."""
        return fingerprint("ledger", [r._identity() for r in self._records])

    def copy(self) -> StepLedger:
        """An independent copy (records are immutable, so a shallow copy suffices)."""
        return StepLedger(self._records, info=json.loads(_dumps(self.info)), rank=self.rank)

    # -- persistence -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints; :meth:`load_state_dict` reads it back."""
        return {
            "format": _FORMAT,
            "format_version": _FORMAT_VERSION,
            "records": [r.to_dict() for r in self._records],
            "info": _canonical(self.info),
            "fingerprint": self.fingerprint,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replaces this ledger's content with ``state`` (from :meth:`state_dict`).

        Raises:
            ManifestError: a record is not a mapping of fields of the recorded types, or the
                records are not numbered 0, 1, 2, ...
        """
        check_ledger_state(state)
        records = [StepRecord.from_dict(r) for r in state.get("records", [])]
        for expected, record in enumerate(records):
            if record.seq != expected:
                raise ManifestError(
                    f"ledger records must be numbered 0, 1, 2, ...; record {expected} "
                    f"('{record.step}') has seq {record.seq}"
                )
        self._records = records
        self.info = dict(state.get("info", {}))

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> StepLedger:
        """A new ledger from :meth:`state_dict` output."""
        ledger = cls()
        ledger.load_state_dict(state)
        return ledger

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Writes the ledger as a JSON manifest, atomically.

        The manifest is written to a temporary file in the same folder, flushed to disk, then
        renamed over ``path``: a reader sees the old manifest or the new one, never half of one.
        The temporary file is created exclusively, never through a link (``O_EXCL``,
        ``O_NOFOLLOW``), with the mode the umask gives every other file of the cache; the rename
        replaces a link planted at ``path``, never its target.

        Args:
            path: the manifest's path, or a folder (the manifest is then ``folder/manifest.json``).

        Returns:
            The path written.
        """
        target = Path(path)
        if target.is_dir():
            target = target / MANIFEST_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        state["checksum"] = fingerprint("manifest", state)
        text = json.dumps(state, indent=2, sort_keys=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        fd = os.open(tmp, flags, 0o666)  # not mkstemp's 0600: another uid reading the cache reads this too
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StepLedger:
        """Reads and verifies a manifest written by :meth:`save`.

        Args:
            path: the manifest, or the folder holding ``manifest.json``.

        Raises:
            ManifestError: the file is missing, not JSON (e.g. truncated), of another format, or
                its checksum does not match its content (it was edited).
        """
        source = Path(path)
        if source.is_dir():
            source = source / MANIFEST_NAME
        text = read_manifest_text(source)
        try:
            return cls._from_text(source, text)
        except RecursionError:
            # Deeply nested JSON: the decoder (or the checksum's walk) runs out of stack.
            raise ManifestError(
                f"the manifest {source} is nested too deeply to be a ledger manifest; "
                "prepare the data again rather than trusting it"
            ) from None

    @classmethod
    def _from_text(cls, source: Path, text: str) -> StepLedger:
        try:
            state = json.loads(text)
        except json.JSONDecodeError as err:
            raise ManifestError(
                f"the manifest {source} is not valid JSON (truncated or corrupt: {err.msg} at "
                f"line {err.lineno}); delete its folder and prepare the data again"
            ) from None
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ManifestError(f"{source} is not a lightning_order manifest (format {_FORMAT!r})")
        version = state.get("format_version", 0)
        if not isinstance(version, int):
            raise ManifestError(f"{source} has manifest format {version!r}, not a version number")
        if version > _FORMAT_VERSION:
            raise ManifestError(
                f"{source} has manifest format {version}, newer than this "
                f"lightning_order understands ({_FORMAT_VERSION}): upgrade lightning_order"
            )
        checksum = state.pop("checksum", None)
        if checksum != fingerprint("manifest", state):
            raise ManifestError(
                f"the manifest {source} does not match its checksum: it was edited or damaged "
                "after it was written; prepare the data again rather than trusting it"
            )
        ledger = cls.from_state_dict(state)
        if state.get("fingerprint") != ledger.fingerprint:
            raise ManifestError(f"the manifest {source} has records that do not match its fingerprint")
        return ledger

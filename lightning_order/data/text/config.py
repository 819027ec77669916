"""``DataConfig``: the arguments of :class:`~lightning_order.data.OrderedDataModule`, typed and checked.

One frozen dataclass holds everything that shapes the prepared data and how it is served. It
validates itself when built (a :class:`~lightning_order.errors.DataError` naming the argument,
what was expected and what was given) and produces the cache identity: the plain data whose
fingerprint names the cache folder. The step functions read their parameters from it, so a step
is a function of plain data and nothing else.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

from lightning_order.data.engine import inputs as _inputs
from lightning_order.data.engine.inputs import InputHash
from lightning_order.data.text.demo import DEMO_NUMERIC_COLUMNS
from lightning_order.data.text.vocab import check_vocab_size
from lightning_order.errors import DataError

__all__ = ["CODE_VERSION", "DataConfig", "InputHash", "TokenizerKind", "available_cpus", "override_identity"]

#: Bump when a step's output changes for the same config, so old caches are not reused.
CODE_VERSION = "3"

#: The tokenizers ``build_vocab`` can train (``Literal``: LightningCLI's ``--help`` lists them).
TokenizerKind = Literal["wordpiece", "bpe"]


@dataclass(frozen=True)
class DataConfig(_inputs.InputFiles):
    """What shapes the prepared data (see :class:`~lightning_order.data.OrderedDataModule` for each field).

    Raises:
        DataError: a value is out of range or of the wrong kind; the message names the argument,
            the expected value and the one given, and the step the argument belongs to.
    """

    dataset: str | None = None
    data_files: Any = None
    text_column: str = "text"
    label_column: str = "label"
    numeric_columns: tuple[str, ...] = ()
    group_column: str | None = None
    val_fraction: float = 0.1
    seed: int = 0
    vocab_size: int = 8000
    tokenizer: TokenizerKind = "wordpiece"
    max_length: int = 128
    num_proc: int | None = None
    demo_size: int = 20000
    dataset_config: str | None = None
    load_split: str = "train"
    lowercase: bool = True
    demo_sources: int = 1
    demo_seed: int = 0
    engineered_features: tuple[str, ...] = ()
    overrides: dict[str, str] = field(default_factory=dict)
    input_hash: InputHash = "content"

    def __post_init__(self) -> None:
        numeric = tuple(self.numeric_columns)
        if self.dataset is None and not numeric:
            numeric = DEMO_NUMERIC_COLUMNS  # the demo corpus brings its own numeric columns
        object.__setattr__(self, "numeric_columns", numeric)
        object.__setattr__(self, "engineered_features", tuple(self.engineered_features))
        val = self.val_fraction
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not 0.0 < float(val) < 1.0:
            raise DataError(
                f"val_fraction must be in (0, 1), got {val!r}; e.g. val_fraction=0.1", step="split"
            )
        object.__setattr__(self, "val_fraction", float(val))
        check_vocab_size(self.vocab_size)
        if self.tokenizer not in get_args(TokenizerKind):
            raise DataError(
                f"tokenizer must be one of {', '.join(get_args(TokenizerKind))}, got {self.tokenizer!r}",
                step="build_vocab",
            )
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1:
            kind = " (a bool is not an int)" if isinstance(self.max_length, bool) else ""
            raise DataError(
                f"max_length must be a positive int, got {self.max_length!r}{kind}; e.g. max_length=128",
                step="encode",
            )
        if self.num_proc is None:  # the default: every CPU this process may run on
            object.__setattr__(self, "num_proc", available_cpus())
        fixes = {
            "num_proc": "e.g. num_proc=1, or leave it out (null) for every available CPU",
            "demo_size": "the demo corpus's rows, e.g. demo_size=2000 (or pass dataset=... for your own data)",
            "demo_sources": "e.g. demo_sources=1",
        }
        for name, fix in fixes.items():
            value = getattr(self, name)
            least = 0 if name == "demo_size" and self.dataset is not None else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise DataError(f"{name} must be an int >= {least}, got {value!r}; {fix}", step="load")
        if self.input_hash not in get_args(InputHash):
            raise DataError(
                f"input_hash must be one of {', '.join(get_args(InputHash))}, got {self.input_hash!r}; "
                "'content' hashes the bytes of every input file (the default), 'size_mtime' trusts size "
                "and modification time (for very large inputs)",
                step="load",
            )
        # The input files are expanded and identified now: the config names them as they are at its creation.
        _ = self.input_identity
        for name in ("seed", "demo_seed"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "lowercase", bool(self.lowercase))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], **extra: Any) -> DataConfig:
        """The config of the fields found in ``arguments`` (e.g. a DataModule's hparams) and ``extra``."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in arguments.items() if k in names}, **extra)

    @property
    def key_column(self) -> str:
        """The column the split is keyed on: the group column, else the (cleaned) text."""
        return self.group_column or self.text_column

    def identity(self, order: Sequence[str]) -> dict[str, Any]:
        """Everything that shapes the prepared data, as plain data (its fingerprint is the cache key).

        Args:
            order: the data steps that will run, in order.
        """
        identity: dict[str, Any] = {
            "code_version": CODE_VERSION,
            "dataset": self.dataset,
            "dataset_config": self.dataset_config,
            "load_split": self.load_split,
            "data_files": self.input_identity,
            "text_column": self.text_column,
            "label_column": self.label_column,
            "numeric_columns": list(self.numeric_columns),
            "group_column": self.group_column,
            "val_fraction": self.val_fraction,
            "seed": self.seed,
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer,
            "max_length": self.max_length,
            "order": list(order),
            "lowercase": self.lowercase,
            "engineered_features": list(self.engineered_features),
            "overrides": dict(self.overrides),
        }
        if self.dataset is None:
            identity["demo"] = {"size": self.demo_size, "sources": self.demo_sources, "seed": self.demo_seed}
        return identity

    def load_identity(self) -> dict[str, Any]:
        """The part of the identity that decides which rows ``load`` reads."""
        ident = self.identity(())
        return {k: ident.get(k) for k in ("dataset_config", "load_split", "data_files", "demo")}


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def override_identity(cls: type, base: type, names: Sequence[str]) -> dict[str, str]:
    """A hash of the source of each method in ``names`` that ``cls`` overrides from ``base``.

    A subclass that overrides a row-wise step changes the data, so its source joins the cache key.
    """
    out = {}
    for name in names:
        method = getattr(cls, name)
        if method is not getattr(base, name):
            try:
                source = inspect.getsource(method)
            except (OSError, TypeError):
                source = f"{cls.__module__}.{cls.__qualname__}"
            out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    return out


def files_identity(data_files: Any, mode: InputHash = "content", dataset: str | None = None) -> Any:
    """The identity of every file ``data_files`` names, globs and folders expanded (see :mod:`~.inputs`)."""
    return _inputs.files_identity(_inputs.expand_data_files(data_files, dataset), mode)


def local_files(data_files: Any, dataset: str | None = None) -> list[Path]:
    """The data files that exist on this machine, globs and folders expanded (remote paths left out)."""
    return _inputs.local_files(_inputs.expand_data_files(data_files, dataset))

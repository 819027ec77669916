"""The base config of every ordered DataModule: the fields all pipelines share, declared and checked once.

:class:`BaseDataConfig` is a frozen dataclass. Each field is documented where it is declared (a
docstring under the field, as litgpt's configs do): :func:`field_docs` reads those docstrings,
and :func:`document_arguments` writes them into the ``Args:`` section of the DataModule's
docstring, so ``lightning-order fit --help``, the YAML schema and the API docs all come from this
one place. A pipeline's config subclasses it (``DataConfig``, ``LMConfig``), adds its own
fields documented the same way, and extends :meth:`BaseDataConfig.validate`.

Every value is checked where it enters (:meth:`BaseDataConfig.__post_init__`): an int that is a
float or a bool, a bool given as a string, a number out of its bounds is a
:class:`~lightning_order.errors.DataError` naming the argument, the step it belongs to, what was
expected and the fix. Nothing is coerced (``seed=1.9`` is refused, not truncated).

Every field shapes the prepared data, and so enters the cache key (:meth:`BaseDataConfig.identity`
derives the key from the fields, as ``datasets``' ``create_config_id`` hashes every keyword),
unless its declaration says otherwise: :data:`SERVES` marks the few that only serve the data
(batch size, workers, processes, engines, shuffling, where the cache lives, enforcement, lock
wait; :data:`SERVING_FIELDS`), :func:`shapes` one that enters under another key, only in some
configs, or as a derived value (the input files' identity, a tokenizer file's content hash), and
:func:`enters_through` one whose effect is in another value of the key. A new field is in the key
by default, so it can never silently reuse a stale cache.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import itertools
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from types import MappingProxyType
from typing import Any, get_args

from lightning_order.data.engine.inputs import (
    InputFiles,
    InputHash,
    check_dataset_name,
    check_files_named,
    expand_path,
)
from lightning_order.data.engine.object_store import is_url
from lightning_order.errors import DataError

__all__ = [
    "SERVES",
    "SERVING_FIELDS",
    "BaseDataConfig",
    "available_cpus",
    "check_bool",
    "check_choice",
    "check_fraction",
    "check_int",
    "check_optional_str",
    "document_arguments",
    "enters_through",
    "field_docs",
    "field_identity",
    "override_identity",
    "shapes",
]

#: The metadata of a field that serves the prepared data but does not shape it (never in the cache key).
SERVES: Mapping[str, Any] = MappingProxyType({"serving": True})
#: The most worker processes a dataloader or a step may be given (a typo guard, not a limit of ours).
MAX_PROCESSES = 1024


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def check_int(
    name: str, value: Any, *, step: str, fix: str, least: int | None = None, most: int | None = None
) -> int:
    """``value`` if it is an int within ``[least, most]``; a :class:`DataError` otherwise (a bool or a float is no int)."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a bool is not an int" if isinstance(value, bool) else type(value).__name__
        raise DataError(f"{name} must be an int, got {value!r} ({kind}); {fix}", step=step)
    if least is not None and value < least:
        raise DataError(f"{name} must be an int >= {least}, got {value!r}; {fix}", step=step)
    if most is not None and value > most:
        raise DataError(f"{name} must be an int <= {most}, got {value!r}; {fix}", step=step)
    return int(value)


def check_bool(name: str, value: Any, *, step: str) -> bool:
    """``value`` if it is a bool (``"false"``, ``0`` or ``None`` are refused: they would be read as something else)."""
    if not isinstance(value, bool):
        raise DataError(
            f"{name} must be true or false, got {value!r} ({type(value).__name__}); "
            f"e.g. {name}=False (in YAML: {name}: false, without quotes)",
            step=step,
        )
    return value


def check_fraction(name: str, value: Any, *, step: str, fix: str, closed: bool = False) -> float:
    """``value`` as a float in ``(0, 1)`` (``(0, 1]`` when ``closed``)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    inside = number and 0.0 < float(value) and (float(value) <= 1.0 if closed else float(value) < 1.0)
    if not inside:
        interval = "(0, 1]" if closed else "(0, 1)"
        raise DataError(f"{name} must be in {interval}, got {value!r}; {fix}", step=step)
    return float(value)


def check_choice(name: str, value: Any, choices: Sequence[Any], *, step: str, fix: str = "") -> Any:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise DataError(
            f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}"
            + (f"; {fix}" if fix else ""),
            step=step,
        )
    return value


def check_optional_str(name: str, value: Any, *, step: str) -> str | None:
    """``value`` if it is ``None`` or a non-empty string."""
    if value is not None and (not isinstance(value, str) or not value):
        raise DataError(f"{name} must be a non-empty string or null, got {value!r}", step=step)
    return value


def shapes(
    *,
    key: str | None = None,
    when: Callable[[Any], bool] | None = None,
    value: Callable[[Any], Any] | None = None,
    **metadata: Any,
) -> dict[str, Any]:
    """The metadata of a field that shapes the data but enters the cache key other than as itself.

    Args:
        key: its key in the identity (dots nest: ``"demo.size"``); the field's name by default.
        when: it enters only for configs where ``when(config)`` is true (``sample_by`` only reads
            ``dataset="text"`` files).
        value: what enters instead of the value (``value(config)``: the input files' identity,
            a file's content hash), so an edit of the file changes the key and a move does not.
        **metadata: further metadata (``internal=True``: set by the DataModule class, not the CLI).
    """
    extra = {"key": key, "when": when, "value": value}
    return {**metadata, **{k: v for k, v in extra.items() if v is not None}}


def enters_through(name: str) -> dict[str, Any]:
    """The metadata of a field whose effect enters the cache key through the value of ``name``.

    ``input_hash`` changes how ``data_files`` is identified; the ``order`` request enters as the
    order resolved from it (the ``order`` argument of :meth:`BaseDataConfig.identity`).
    """
    return {"through": name}


def field_identity(config: Any) -> dict[str, Any]:
    """The cache identity of a dataclass config derived from its fields (see the module docstring).

    Every field enters under its name unless its metadata says it serves (:data:`SERVES`), enters
    through another value (:func:`enters_through`), or enters differently (:func:`shapes`).
    """
    out: dict[str, Any] = {}
    for item in fields(config):
        meta = item.metadata
        if meta.get("serving") or "through" in meta or not meta.get("when", _always)(config):
            continue
        value = meta["value"](config) if "value" in meta else getattr(config, item.name)
        *parents, leaf = str(meta.get("key", item.name)).split(".")
        target = out
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = _plain(value)
    return out


def _always(config: Any) -> bool:
    return True


def _plain(value: Any) -> Any:
    """Tuples as lists and mappings as dicts: the identity is plain JSON data."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _check_data_files(value: Any) -> None:
    def ok(item: Any) -> bool:
        return isinstance(item, (str, os.PathLike))

    valid = (
        value is None
        or ok(value)
        or (isinstance(value, (list, tuple)) and all(ok(v) for v in value))
        or (
            isinstance(value, Mapping)
            and all(
                isinstance(k, str) and (ok(v) or (isinstance(v, (list, tuple)) and all(map(ok, v))))
                for k, v in value.items()
            )
        )
    )
    if not valid:
        raise DataError(
            f"data_files must be a path, a list of paths or a dict of split -> path(s), got {value!r} "
            f"({type(value).__name__}); e.g. data_files='corpus/*.txt'",
            step="load",
        )


@dataclass(frozen=True)
class BaseDataConfig(InputFiles):
    """The fields every ordered DataModule takes (see each field's docstring)."""

    dataset: str | None = field(default=None, metadata=shapes(value=lambda config: config.dataset_identity))
    """anything :func:`datasets.load_dataset` takes (``"csv"``, ``"json"``, ``"parquet"``, ``"text"`` with ``data_files``, a local dataset folder, or a hub name already in the local cache; any other name is refused before anything is loaded); ``None`` for the pipeline's built-in corpus."""
    data_files: str | list[str] | dict[str, str | list[str]] | None = field(
        default=None, metadata=shapes(value=lambda config: config.input_identity)
    )
    """files for ``dataset``: a path, a glob, a folder, a list of them, or a dict of split -> paths (``~`` and ``$VAR`` expanded; required by the file builders text, csv, json, parquet, arrow)."""
    text_column: str = "text"
    """the column holding the text."""
    _: KW_ONLY  # the rest by keyword only; declared in the LM DataModule's positional order (arguments.positional_order)
    val_fraction: float = 0.1
    """the validation share, in (0, 1)."""
    seed: int = 0
    """seeds the split and the train shuffling."""
    vocab_size: int = 8000
    """the tokenizer's *target* size, special tokens included (the size built is ``dm.vocab_size``, a dim)."""
    batch_size: int = field(default=32, metadata=SERVES)
    """rows (or blocks) per batch in the dataloaders."""
    num_workers: int = field(default=0, metadata=SERVES)
    """dataloader worker processes."""
    num_proc: int | None = field(default=None, metadata=SERVES)
    """processes for the steps that run per partition of the data; ``None``: every available CPU."""
    cache_dir: str | None = field(default=None, metadata=SERVES)
    """the cache root (``~`` and ``$VAR`` expanded); ``None``: ``$LIGHTNING_ORDER_CACHE`` or ``~/.cache/lightning_order``."""
    order: Sequence[str] | str | None = field(default=None, metadata=enters_through("order"))
    """the data steps to run, in order (a permutation or subset of the pipeline's data steps); ``None`` for the mandated order."""
    enforce: bool = field(default=True, metadata=SERVES)
    """refuse an order that breaks the pipeline's rules (``OrderError`` at construction); ``False`` runs it as asked and records what really happened."""
    dataset_config: str | None = None
    """the configuration name passed to ``load_dataset`` (its ``name``)."""
    load_split: str = "train"
    """the split of ``load_dataset`` to read (it is re-split by key)."""
    input_hash: InputHash = field(default="content", metadata=enters_through("data_files"))
    """how input files enter the cache key: ``"content"`` (xxh3 of their bytes, any change is seen) or ``"size_mtime"`` (size and modification time only, for very large inputs)."""
    shuffle: bool = field(default=True, metadata=SERVES)
    """shuffle the train data each epoch (seeded; the order of an epoch is a function of the seed and the epoch)."""
    lock_timeout: float | None = field(default=None, metadata=SERVES)
    """seconds to wait for another process preparing the same cache (its holder is named every 10 s while waiting); ``None``: wait for as long as it takes."""
    storage_options: Mapping[str, Any] | None = field(default=None, metadata=SERVES, repr=False)
    """keyword arguments of the fsspec filesystem of ``s3://`` (or any URL) inputs and ``cache_dir`` (endpoint, credentials); ``None``: the environment's (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...). Never written anywhere."""

    def __post_init__(self) -> None:
        self.validate()
        _ = self.input_identity  # the input files as they are when the config is built

    def validate(self) -> None:
        """Checks every shared field (a subclass extends it and calls ``super().validate()`` first)."""
        set_ = functools.partial(object.__setattr__, self)
        check_optional_str("dataset", self.dataset, step="load")
        check_dataset_name(self.dataset)
        _check_data_files(self.data_files)
        check_files_named(self.dataset, self.data_files)
        if not isinstance(self.text_column, str) or not self.text_column:
            raise DataError(f"text_column must be a column name, got {self.text_column!r}", step="load")
        set_(
            "val_fraction",
            check_fraction("val_fraction", self.val_fraction, step="split", fix="e.g. val_fraction=0.1"),
        )
        set_("seed", check_int("seed", self.seed, step="split", fix="e.g. seed=0"))
        if self.num_proc is None:  # the default: every CPU this process may run on
            set_("num_proc", available_cpus())
        check_int(
            "num_proc",
            self.num_proc,
            step="load",
            least=1,
            most=MAX_PROCESSES,
            fix="e.g. num_proc=1, or leave it out (null) for every available CPU",
        )
        check_optional_str("dataset_config", self.dataset_config, step="load")
        if not isinstance(self.load_split, str) or not self.load_split:
            raise DataError(
                f"load_split must be a split name, got {self.load_split!r}; e.g. load_split='train'",
                step="load",
            )
        check_choice(
            "input_hash",
            self.input_hash,
            get_args(InputHash),
            step="load",
            fix="'content' hashes the bytes of every input file (the default), 'size_mtime' trusts size and "
            "modification time (for very large inputs)",
        )
        check_int(
            "batch_size", self.batch_size, step="shard", least=1, most=1 << 24, fix="e.g. batch_size=32"
        )
        check_int(
            "num_workers",
            self.num_workers,
            step="shard",
            least=0,
            most=MAX_PROCESSES,
            fix="e.g. num_workers=0 (load in the main process) or 2",
        )
        check_bool("shuffle", self.shuffle, step="shard")
        check_bool("enforce", self.enforce, step="prepare_data")
        if self.lock_timeout is not None and (
            isinstance(self.lock_timeout, bool)
            or not isinstance(self.lock_timeout, (int, float))
            or not self.lock_timeout >= 0
        ):
            raise DataError(
                f"lock_timeout must be a number of seconds >= 0 or None, got {self.lock_timeout!r}; e.g. lock_timeout=600",
                step="prepare_data",
            )
        check_optional_str("cache_dir", self.cache_dir, step="prepare_data")
        if self.storage_options is not None and not (
            isinstance(self.storage_options, Mapping)
            and all(isinstance(k, str) for k in self.storage_options)
        ):
            raise DataError(
                f"prepare_data: storage_options must be a mapping of option names to values "
                f"(the fsspec filesystem's keyword arguments), got {type(self.storage_options).__name__}"
            )
        # "$SCRATCH/x" expanded (or refused), never a folder named "$SCRATCH"; a URL is the store's
        # (published there by remote_cache), never a local folder named "s3:".
        if self.cache_dir is not None and not is_url(self.cache_dir):
            set_("cache_dir", expand_path(self.cache_dir, "cache_dir", "prepare_data"))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], **extra: Any) -> BaseDataConfig:
        """The config of the fields found in ``arguments`` (e.g. a DataModule's arguments) and ``extra``."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in arguments.items() if k in names}, **extra)

    def identity(self, order: Sequence[str]) -> dict[str, Any]:
        """Everything that shapes the prepared data, as plain data (its fingerprint is the cache key).

        Derived from the fields (:func:`field_identity`), plus what no field holds
        (:meth:`fixed_identity`: the code version, a built-in corpus's source).

        Args:
            order: the data steps that will run, in order.
        """
        return {**self.fixed_identity(), **field_identity(self), "order": list(order)}

    def fixed_identity(self) -> dict[str, Any]:
        """What shapes the data beside the fields (a pipeline's code version); a subclass says."""
        return {}

    def source_identity(self) -> dict[str, Any]:
        """Where the data comes from, as plain data: part of every pipeline's cache identity."""
        return {
            "dataset": self.dataset_identity,
            "dataset_config": self.dataset_config,
            "load_split": self.load_split,
            "data_files": self.input_identity,
            "text_column": self.text_column,
        }


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
            except (OSError, TypeError):  # defined by exec or `python -c`: no file to read
                source = _code_identity(method) or f"{cls.__module__}.{cls.__qualname__}"
            out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    return out


def _code_identity(function: Any) -> str | None:
    """What a function's behaviour is made of when its source cannot be read: its compiled code.

    The qualified name alone stayed the same when an override defined by ``exec`` was edited, so
    the old cleaned data was reused. Bytecode, constants (nested functions' code recursively),
    names and defaults change with the code. ``None`` for a callable without code.
    """
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return None
    defaults = getattr(function, "__defaults__", None), getattr(function, "__kwdefaults__", None)
    return f"{_code_text(code)}|{defaults!r}"


def _code_text(code: Any) -> str:
    consts = ",".join(_code_text(c) if inspect.iscode(c) else repr(c) for c in code.co_consts)
    return f"{code.co_code.hex()}|{consts}|{code.co_names}|{code.co_varnames}|{code.co_freevars}"


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and its bases (litgpt's attribute docstrings)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def document_arguments(config: type, extra: Mapping[str, str] | None = None) -> Any:
    """A class decorator: appends ``Args:`` to the class docstring, one entry per ``__init__`` argument.

    Each argument's text is the docstring of the config field of that name (:func:`field_docs`),
    or ``extra[name]`` for an argument that is no config field.
    """

    def decorate(cls: type) -> type:
        docs = {**field_docs(config), **(extra or {})}
        names = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]  # type: ignore[misc]
        missing = [n for n in names if n not in docs]
        if missing:
            raise TypeError(f"{cls.__name__}: no documentation for the arguments {missing}")
        lines = ["", "Args:"]
        for name in names:
            wrapped = textwrap.wrap(f"{name}: {docs[name]}", width=96, subsequent_indent="        ")
            lines += [f"    {line}" for line in wrapped]
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or "") + "\n" + "\n".join(lines) + "\n"
        return cls

    return decorate


#: The shared fields that serve the prepared data but do not shape it (never in the cache key).
SERVING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(BaseDataConfig) if f.metadata.get("serving"))

"""The ``lightning-order`` entry point: answers what it can without importing torch or Lightning.

Importing PyTorch Lightning takes seconds; ``--help``, ``audit``, ``graph`` and ``prepare`` need
none of it. :func:`main` answers them here and hands everything else to
:func:`lightning_order.cli.main` (LightningCLI), which imports Lightning:

* ``--help`` / no command: the subcommands and where their options are listed;
* ``audit`` and ``graph``: their own small parsers (:func:`lightning_order.cli` imports the same
  functions);
* ``prepare``: when the configuration is the plain ``OrderedDataModule`` (the ``data:`` section of
  the ``--config`` files and ``--data.*`` options, of known names and plain types), the data is
  prepared by :func:`lightning_order.data.text.prepare.prepare_once`, the same function the DataModule
  calls (the same cache key, the same folder). Anything else (``--help``, a ``class_path``, an
  unknown option, a value of an unexpected type, a configuration the DataConfig refuses) goes to
  LightningCLI, so its messages and exit codes stay the ones users know.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["HELP", "main"]

#: The subcommands and their one-line help (``prepare``/``audit``/``graph`` as in :mod:`.cli`).
_COMMANDS = {
    "fit": "Train a model (LightningCLI), with the order checks on by default.",
    "validate": "Validate a model (LightningCLI).",
    "test": "Test a model (LightningCLI).",
    "predict": "Predict with a model (LightningCLI).",
    "prepare": "Run the data pipeline only and write the cache and its manifest (same config as fit).",
    "audit": "Re-check prepared pipelines (a cache root, one pipeline folder or a manifest).",
    "graph": "Print the pipeline DAG as Mermaid or DOT, with executed steps and violated edges.",
}

HELP = (
    "usage: lightning-order [-h] {" + ",".join(_COMMANDS) + "} ...\n\n"
    "The right order of data preparation for PyTorch Lightning, by default and proven.\n\n"
    "subcommands:\n"
    + "".join(f"  {name:<10} {text}\n" for name, text in _COMMANDS.items())
    + "\nEach subcommand lists its options: lightning-order <subcommand> --help\n"
)

# The plain OrderedDataModule arguments the light `prepare` takes, and the values it accepts
# (anything else goes to LightningCLI, which types and explains it).
_INT = (
    "seed",
    "vocab_size",
    "max_length",
    "batch_size",
    "num_workers",
    "demo_size",
    "demo_sources",
    "demo_seed",
)
_STR = ("text_column", "label_column", "load_split")
_OPTIONAL_STR = ("dataset", "dataset_config", "group_column", "cache_dir")
_BOOL = ("lowercase", "enforce", "shuffle")
_CHOICES = {"tokenizer": ("wordpiece", "bpe"), "input_hash": ("content", "size_mtime")}
_SECTIONS = ("trainer", "model", "order", "optimizer", "lr_scheduler")  # fit options prepare ignores
_SERVE_ONLY = ("batch_size", "num_workers", "shuffle", "cache_dir", "order", "enforce")


def _plain_value(name: str, value: Any) -> bool:
    """Whether ``value`` is of the type the DataModule declares for argument ``name``."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if name in _INT:
        return is_int
    if name == "num_proc":
        return value is None or is_int
    if name == "val_fraction":
        return is_int or isinstance(value, float)
    if name in _STR:
        return isinstance(value, str)
    if name in _OPTIONAL_STR:
        return value is None or isinstance(value, str)
    if name in _BOOL:
        return isinstance(value, bool)
    if name in _CHOICES:
        return value in _CHOICES[name]
    if name == "numeric_columns":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if name == "order":
        return (
            value is None
            or isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        )
    if name == "data_files":
        return value is None or isinstance(value, (str, list, dict))
    return False


def _data_arguments(argv: list[str]) -> dict[str, Any] | None:
    """The ``data:`` arguments of a ``prepare`` command line, or ``None`` when LightningCLI must read it."""
    import yaml

    data: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or token in ("--help", "-h"):
            return None
        name, has_value, value = token[2:].partition("=")
        if not has_value:
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if name == "config":
            try:
                loaded = yaml.safe_load(Path(value).read_text()) or {}
            except (OSError, yaml.YAMLError):
                return None
            section = loaded.get("data") if isinstance(loaded, dict) else None
            if section is None:
                continue
            if not isinstance(section, dict) or "class_path" in section or "init_args" in section:
                return None
            data.update(section)
        elif name.startswith("data."):
            try:
                data[name[len("data.") :]] = yaml.safe_load(value)
            except yaml.YAMLError:
                return None
        elif name.split(".", 1)[0] not in (*_SECTIONS, "seed_everything"):
            return None
    if not all(_plain_value(k, v) for k, v in data.items()):
        return None
    return data


def _prepare_light(argv: list[str]) -> int | None:
    """``prepare`` without Lightning; ``None`` when the command line is for LightningCLI."""
    data = _data_arguments(argv)
    if data is None:
        return None
    from lightning_order.cli.console import error_lines, prepare_report, print_error
    from lightning_order.data.engine import cache as _cache
    from lightning_order.data.text import prepare as _prepare
    from lightning_order.data.text.config import DataConfig
    from lightning_order.data.text.features import ENGINEERED_FEATURES
    from lightning_order.errors import LightningOrderError

    try:
        config = DataConfig.from_arguments(data, engineered_features=ENGINEERED_FEATURES, overrides={})
        order = _prepare.order_of(config, data.get("order"), bool(data.get("enforce", True)))
    except LightningOrderError:
        return None  # LightningCLI reports a refused configuration its own way
    root = Path(data["cache_dir"]).expanduser() if data.get("cache_dir") else _cache.default_cache_dir()
    try:
        folder = _prepare.prepare_once(root, config, order)
    except LightningOrderError as err:
        print_error(error_lines(err))
        return 1
    prepare_report(_Prepared(folder))
    return 0


class _Prepared:
    """What :func:`~lightning_order.cli.console.prepare_report` reads of a datamodule."""

    def __init__(self, cache_path: Path) -> None:
        self.cache_path = cache_path


def main(args: list[str] | None = None) -> int:
    """The ``lightning-order`` command (see the module docstring for what is answered here).

    Args:
        args: the command line after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code, as :func:`lightning_order.cli.main` returns it.
    """
    argv = list(sys.argv[1:] if args is None else args)
    command = argv[0] if argv else None
    if command in (None, "-h", "--help"):
        sys.stdout.write(HELP)
        return 0
    if command in ("audit", "graph"):
        from lightning_order.cli.console import error_lines, print_error
        from lightning_order.errors import LightningOrderError

        try:
            return _tool(command, argv[1:])
        except LightningOrderError as err:
            print_error(error_lines(err))
            return 1
    if command == "prepare":
        code = _prepare_light(argv[1:])
        if code is not None:
            return code
    from lightning_order.cli.lightning import main as cli_main

    return cli_main(args)


def _tool(command: str, argv: list[str]) -> int:
    from argparse import ArgumentError

    from lightning_order.cli import tools
    from lightning_order.cli.console import error_lines, print_error

    try:
        return tools.audit_main(argv) if command == "audit" else tools.graph_main(argv)
    except ArgumentError as err:
        print_error(error_lines(err, f"lightning-order {command}"))
        return 2

"""The ``lightning-order`` command: one dispatcher, light where it can be.

Importing PyTorch Lightning takes seconds; ``--help``, ``audit``, ``graph`` and a ``prepare``
need none of it. :func:`main` answers them here and hands the rest to
:func:`lightning_order.cli.lightning.run` (LightningCLI):

* ``--help`` / no command: the subcommands (:data:`~lightning_order.cli.help.HELP`);
* ``audit``, ``graph`` and ``export``: :mod:`lightning_order.cli.tools`;
* ``prepare`` of a pipeline's own DataModule (a ``data:`` section without ``class_path``):
  the ``--config`` files and the options are parsed once, by jsonargparse against the pipeline's
  typed config class (:mod:`lightning_order.data.engine.config`), and the data is prepared by the
  pipeline's preparation module, the same functions its DataModule calls (the same cache key,
  the same folder). That parser answers ``--help``, ``--print_config``, a rejected option (with
  the nearest one) and a refused value itself; ``prepare`` of a DataModule class the command
  names (``data.class_path``) is parsed by LightningCLI instead, which can build any class;
* ``fit``/``validate``/``test``/``predict``: :class:`~lightning_order.cli.lightning.OrderCLI`.

The pipeline is the one whose model the command names (:func:`spec_of_command`: the
``model`` of the ``--config`` files or of a ``--model`` option), else ``"standard"``.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from argparse import ArgumentError
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_order.cli.help import HELP, LIGHTNING_COMMANDS, TOOLS

if TYPE_CHECKING:  # pragma: no cover - imported where used: `--help` imports nothing else
    from lightning_order.spec import PipelineSpec

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_REFUSED", "EXIT_USAGE", "main", "spec_of_command", "spec_of_constructor"]

#: Exit codes of :func:`main` for user errors: a run refused (any lightning_order error), a command
#: line rejected (jsonargparse), as argparse does.
EXIT_REFUSED, EXIT_USAGE = 1, 2
#: The exit code when the reader of the output went away (``audit ... | head``): 128 + SIGPIPE, what a
#: shell reports for a command a closed pipe stopped. Never 1, which ``audit`` uses for "violations".
EXIT_BROKEN_PIPE = 141
#: The options a parser rejected, in its message (argparse's wording, which jsonargparse keeps).
_REJECTED = re.compile(r"unrecognized arguments: ([^;]*)")
#: The sections of a fit config that ``prepare`` reads past (only ``data:`` shapes the data).
_OTHER_SECTIONS = ("trainer", "model", "order", "optimizer", "lr_scheduler", "ckpt_path")


def main(args: list[str] | None = None) -> int:
    """The ``lightning-order`` command.

    Args:
        args: the command line after the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success; ``audit`` returns 1 on violations and 2 on unreadable
        manifests; a user error is printed without a traceback and returns 1 (the run was
        refused) or 2 (the command line was rejected); 141 when the output's reader went away
        (``| head``), quietly.
    """
    argv = list(sys.argv[1:] if args is None else args)
    try:
        code = _dispatch(argv, args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    """Points stdout at the null device, so the interpreter's last flush meets no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a fileno() (captured): nothing is flushed to a pipe
        pass


def _dispatch(argv: list[str], args: list[str] | None) -> int:
    """:func:`main` for the command line ``argv`` (``args``: as given to :func:`main`, for LightningCLI)."""
    command = argv[0] if argv else None
    if command in (None, "-h", "--help"):
        sys.stdout.write(HELP)
        return 0
    from lightning_order.cli.console import error_lines, print_error
    from lightning_order.errors import LightningOrderError

    known = (*LIGHTNING_COMMANDS, *TOOLS)
    if command not in known and not command.startswith("-"):
        from lightning_order.cli.parsing import nearest

        hint = nearest(command, known)
        print_error(
            [
                f"lightning-order: error: no command {command!r}"
                + (f"; did you mean {hint!r}?" if hint else f"; expected one of {', '.join(known)}"),
                "  see `lightning-order --help` for the commands",
            ]
        )
        return EXIT_USAGE
    prog = f"lightning-order {command}" if command in known else "lightning-order"
    spec = None
    try:
        if command in ("audit", "graph"):
            from lightning_order.cli import tools

            return tools.audit_main(argv[1:]) if command == "audit" else tools.graph_main(argv[1:])
        if command == "export":
            from lightning_order.cli import tools

            return tools.export_main(argv[1:])
        from lightning_order.cli.parsing import check_config_file

        for path in _config_files(argv[1:]):
            check_config_file(path)  # before any parser: it would take the last of a repeated key
        spec = spec_of_command(argv[1:])
        if command == "prepare" and _class_path(argv[1:], "data") is None:
            return _prepare_light(argv[1:], spec)
        from lightning_order.cli.lightning import run

        if command == "prepare":
            run(argv[1:], spec, prepare=True, prog=prog)
        else:
            run(args, spec, prog="lightning-order")
    except ArgumentError as err:
        if spec is not None:
            err = _other_pipeline_options(err, spec, argv[1:])
        print_error(error_lines(err, prog))
        return EXIT_USAGE
    except LightningOrderError as err:
        print_error(error_lines(err))
        return EXIT_REFUSED
    return 0


def _other_pipeline_options(error: ArgumentError, spec: PipelineSpec, argv: list[str]) -> ArgumentError:
    """``error`` saying which pipeline ran, for a rejected ``--data.X`` that another pipeline's data takes.

    The nearest option of the pipeline that ran (``--data.block_size: did you mean
    --data.vocab_size?`` under classification) is the wrong answer there: the option is right, the
    pipeline is not.
    """
    from dataclasses import fields

    from lightning_order.pipelines import PIPELINES

    rejected = _REJECTED.search(error.message)
    if rejected is None:
        return error
    options = {name: {f.name for f in fields(each.config_class())} for name, each in PIPELINES.items()}
    message = error.message
    for name in dict.fromkeys(re.findall(r"--data\.(\w+)", rejected.group(1))):
        theirs = [n for n, known in options.items() if n != spec.name and name in known]
        if name in options.get(spec.name, ()) or not theirs:
            continue
        other = PIPELINES[theirs[0]]
        named = _class_path(argv, "model")
        why = f"its model is {named}" if named else "the default, as no model is named"
        message = re.sub(rf"; --data\.{name}: did you mean [^;?]*\?", "", message)
        message += (
            f"; --data.{name} is an option of the {other.name!r} pipeline ({other.title or other.datamodule}), and this "
            f"command runs the {spec.name!r} pipeline ({why}): to run the {other.name!r} pipeline name its model "
            f"(--model lightning_order.{other.model.partition(':')[2]}, or model: in the config)"
        )
    if message == error.message:
        return error
    explained = ArgumentError(None, message)
    explained.argument_name = error.argument_name
    return explained


# -- which pipeline -------------------------------------------------------------------------------
def _config_files(argv: list[str]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c") and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


def _class_path(argv: list[str], section: str) -> str | None:
    """The class the command names for ``section`` (``model``, ``data``): the last one of its config
    files or its ``--<section>`` / ``--<section>.class_path`` options."""
    import yaml

    found = None
    for path in _config_files(argv):
        try:
            config = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue  # the parser reports an unreadable config itself
        value = config.get(section) if isinstance(config, dict) else None
        if isinstance(value, dict) and isinstance(value.get("class_path"), str):
            found = value["class_path"]
        elif isinstance(value, str):
            found = value
    for i, arg in enumerate(argv):
        if arg in (f"--{section}", f"--{section}.class_path") and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith((f"--{section}=", f"--{section}.class_path=")):
            found = arg.split("=", 1)[1]
    return found


def spec_of_command(argv: list[str]) -> PipelineSpec:
    """The pipeline a command line is for: the one whose model (or a subclass of it) it names.

    Our own models are recognised by name without importing them (``lightning_order.X`` or
    their module's path); a user's class is imported (as LightningCLI would) and matched by
    its base classes, else by the dims its constructor takes (a ``transformers`` wrapper taking
    ``vocab_size``, ``padded_vocab_size`` and ``block_size`` is an LM: :func:`spec_of_constructor`).
    Anything else is the default pipeline.
    """
    from lightning_order.pipelines import DEFAULT_PIPELINE, PIPELINES, spec_for, spec_of_class

    path = _class_path(argv, "model")
    if not path:
        return PIPELINES[DEFAULT_PIPELINE]
    for spec in PIPELINES.values():
        module, _, name = spec.model.partition(":")
        if path in (f"lightning_order.{name}", f"{module}.{name}", f"lightning_order.models.{name}"):
            return spec
    try:
        from jsonargparse.typing import import_object

        cls = import_object(path)
    except (ImportError, AttributeError, ValueError, TypeError):
        return PIPELINES[DEFAULT_PIPELINE]  # LightningCLI explains a class it cannot import
    if not isinstance(cls, type):
        return PIPELINES[DEFAULT_PIPELINE]
    return spec_for(classes=[cls]) if spec_of_class(cls) is not None else spec_of_constructor(cls)


def spec_of_constructor(cls: type) -> PipelineSpec:
    """The pipeline whose dims ``cls``'s constructor takes, all of them (the most dims wins a tie);
    the default pipeline for a constructor that takes no pipeline's dims."""
    from lightning_order.pipelines import DEFAULT_PIPELINE, PIPELINES

    try:
        taken = set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # a constructor Python cannot read: LightningCLI explains it
        return PIPELINES[DEFAULT_PIPELINE]
    fitting = [spec for spec in PIPELINES.values() if spec.dims and set(spec.dims) <= taken]
    return max(fitting, key=lambda spec: len(spec.dims), default=PIPELINES[DEFAULT_PIPELINE])


# -- prepare without Lightning ----------------------------------------------------------------------
def _prepare_arguments(argv: list[str], spec: PipelineSpec) -> dict[str, Any]:
    """The ``data:`` arguments of a ``prepare`` command line, parsed by jsonargparse against the
    pipeline's config class: the one parser of ``prepare`` for the pipeline's own DataModule.

    Raises:
        ArgumentError: an option or value the parser rejects (with the nearest valid option).
        SystemExit: ``--help`` or ``--print_config`` answered.
    """
    from dataclasses import fields

    from jsonargparse import ActionConfigFile, ArgumentParser

    from lightning_order.cli.help import TOOLS as TOOL_HELP
    from lightning_order.cli.parsing import STRICT_PARSER, parser_options, with_suggestions

    config_class = spec.config_class()
    internal = {f.name for f in fields(config_class) if f.metadata.get("internal")}
    parser = ArgumentParser(
        exit_on_error=False, prog="lightning-order prepare", description=TOOL_HELP["prepare"], **STRICT_PARSER
    )
    parser.add_argument("-c", "--config", action=ActionConfigFile)
    parser.add_class_arguments(config_class, "data", skip=internal)
    for section in _OTHER_SECTIONS:
        # Plain types: a section is read past, never resolved (a class_path would import it).
        parser.add_argument(f"--{section}", type=dict | str | None, default=None)
    parser.add_argument("--seed_everything", type=int | bool | None, default=None)
    parser.add_argument("--torch_num_threads", type=int | None, default=None)
    try:
        parsed = parser.parse_args(argv)
    except ArgumentError as err:
        raise with_suggestions(err, parser_options(parser), argv) from err
    data = parsed.get("data")
    # as_dict, not dict(): dict() flattened {"class_path": ...} into dotted keys that the config
    # then dropped, and data_files vanished (the working directory's files were prepared).
    return {} if data is None else data.as_dict() if hasattr(data, "as_dict") else dict(data)


def _prepare_light(argv: list[str], spec: PipelineSpec) -> int:
    """``prepare`` of the pipeline's own DataModule, without Lightning: parse once, prepare, report."""
    try:
        data = _prepare_arguments(argv, spec)
    except SystemExit as done:  # --help, --print_config: answered and printed
        return int(done.code or 0)
    from lightning_order.cli.console import error_lines, prepare_report, print_error
    from lightning_order.data.engine import cache as _cache
    from lightning_order.data.engine.object_store import is_url
    from lightning_order.data.engine.remote_cache import publish_prepared
    from lightning_order.errors import LightningOrderError
    from lightning_order.pipelines import resolve

    preparation = resolve(spec.preparation)
    try:
        _refuse_classes(data)
        config = preparation.plain_config(data)
        order = preparation.order_of(config, config.order, config.enforce)
    except LightningOrderError as err:
        print_error(error_lines(err))
        return EXIT_REFUSED
    try:
        if config.cache_dir is not None and is_url(config.cache_dir):  # published there, never a folder "s3:"
            remote = publish_prepared(preparation, config, order, required=spec.files)
            remote.load_manifest("prepare_data")
            folder = remote.mirror  # the manifest's local copy, for the report
        else:
            root = Path(config.cache_dir).expanduser() if config.cache_dir else _cache.default_cache_dir()
            folder = preparation.prepare_cache(root, config, order, required=spec.files)
    except LightningOrderError as err:
        print_error(error_lines(err))
        return EXIT_REFUSED
    prepare_report(_Prepared(folder))
    return 0


def _refuse_classes(data: dict[str, Any]) -> None:
    """Refuses a data option given as a class: jsonargparse resolves ``class_path`` under ``Any``
    (importing it), and no data option takes a class."""
    from lightning_order.errors import DataError

    for name, value in data.items():
        if isinstance(value, dict) and "class_path" in value:
            raise DataError(
                f"data.{name} names a class ({value['class_path']!r}), and no data option takes one; "
                f"give {name} as plain values (e.g. data_files='corpus/*.txt')",
                step="load" if name in ("dataset", "data_files") else None,
            )


class _Prepared:
    """What :func:`~lightning_order.cli.console.prepare_report` reads of a datamodule."""

    def __init__(self, cache_path: Path) -> None:
        self.cache_path = cache_path

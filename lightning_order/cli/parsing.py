"""Strict command lines: no option accepted by a prefix of its name, the nearest option offered for a typo.

argparse (and jsonargparse 4, which warns and expands) accepts any unique prefix of an option:
``--trainer.max_st 3`` silently became ``--trainer.max_steps 3``, so a typo could change a run
without a word. Every parser of the ``lightning-order`` command is built with
:data:`STRICT_PARSER` (``allow_abbrev=False``), and a rejected option is answered with the
nearest valid one (:func:`with_suggestions`, by :mod:`difflib`'s similarity ratio), the way
``git`` answers a mistyped subcommand. A ``--config`` file is read as strictly
(:func:`check_config_file`): YAML keeps the last of a key written twice, silently, and an empty
file reaches the parser as nothing at all. Nothing here imports Lightning.
"""

from __future__ import annotations

import difflib
import inspect
import re
from argparse import ArgumentError
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "STRICT_PARSER",
    "check_config_file",
    "nearest",
    "parser_options",
    "suggest_for_unknown",
    "with_suggestions",
]

#: Keyword arguments every parser of the CLI is built with: options are matched by their full name.
STRICT_PARSER: dict[str, Any] = {"allow_abbrev": False}
#: How close a suggestion must be (difflib's ratio): close enough for a typo, not any option at all.
_CUTOFF = 0.6
#: A long option as a help text writes it (``--trainer.max_steps``), not a dotted prefix (``--data.``).
_LONG_OPTION = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*(?:\.[\w-]+)*")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)$", re.DOTALL)
_NOT_ACCEPTED = re.compile(r"class_path '([\w.]+)':\s*Option '(\w+)' is not accepted")


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like ``word`` (difflib's ratio at least 0.6), or ``None``."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


def parser_options(parser: Any) -> list[str]:
    """Every long option an argparse (or jsonargparse) parser's help lists, ``--help`` included.

    Read from :meth:`~argparse.ArgumentParser.format_help`, the public view of a parser's options
    (their table is argparse's private ``_option_string_actions``); built only for a rejected
    command line, so its cost (milliseconds) is paid once, on the way out.
    """
    return sorted(set(_LONG_OPTION.findall(parser.format_help())))


def _class_options(class_path: str) -> list[str]:
    """The constructor parameters of ``class_path`` (empty when it cannot be imported)."""
    try:
        from jsonargparse.typing import import_object

        signature = inspect.signature(import_object(class_path).__init__)
    except (ImportError, AttributeError, ValueError, TypeError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [name for name, p in signature.parameters.items() if name != "self" and p.kind in kinds]


def suggest_for_unknown(message: str, options: Sequence[str], argv: Sequence[str] = ()) -> list[str]:
    """``did you mean ...?`` for each option a parser's error message rejects.

    Args:
        message: the parser's error (``unrecognized arguments: --trainer.max_st 3``, or
            jsonargparse's ``class_path 'X': Option 'n_layr' is not accepted`` for a subclass's
            argument).
        options: the valid long options of the parser that rejected them.
        argv: the command line, to write a subclass's option the way it was typed.

    Returns:
        One ``--given: did you mean --option?`` per rejected option that has a near valid one.
    """
    hints = []
    unrecognized = _UNRECOGNIZED.search(message)
    if unrecognized:
        for token in unrecognized.group(1).split():
            given = token.split("=", 1)[0]
            if not given.startswith("--"):
                continue
            match = nearest(given, options)
            if match and match != given:
                hints.append(f"{given}: did you mean {match}?")
    for class_path, name in _NOT_ACCEPTED.findall(message):
        match = nearest(name, _class_options(class_path))
        if not match:
            continue
        typed = next((a.split("=", 1)[0] for a in argv if re.search(rf"\.{name}(=|$)", a)), None)
        shown = f"{typed[: -len(name)]}{match}" if typed else match
        hints.append(f"{typed or name}: did you mean {shown}?")
    return hints


def with_suggestions(error: ArgumentError, options: Sequence[str], argv: Sequence[str] = ()) -> ArgumentError:
    """``error`` with :func:`suggest_for_unknown`'s hints appended (itself when there are none)."""
    hints = suggest_for_unknown(error.message, options, argv)
    if not hints:
        return error
    suggested = ArgumentError(None, f"{error.message.rstrip()}; {'; '.join(hints)}")
    suggested.argument_name = error.argument_name
    return suggested


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that writes a key twice (YAML itself keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: overriding merged keys is the point
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in lines:
                    raise _DuplicateKey(key, lines[key], line)
                lines[key] = line
            except TypeError:  # an unhashable key: the parser refuses it itself
                continue
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, again: int) -> None:
        super().__init__(key, first, again)
        self.key, self.first, self.again = key, first, again


def check_config_file(path: str | Path) -> None:
    """Refuses a ``--config`` file that is empty or writes a key twice in one mapping.

    A file that cannot be read or is not YAML is left to the parser, which names it itself.

    Raises:
        ArgumentError: naming the file, and for a repeated key the key and both lines.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return
    try:
        config = yaml.load(text, Loader=_UniqueKeys)  # a SafeLoader: builds plain data only
    except _DuplicateKey as dup:
        raise ArgumentError(
            None,
            f"config file {path}, line {dup.again}: key {dup.key!r} is written twice in the same section (lines "
            f"{dup.first} and {dup.again}), and YAML would silently keep the last value: keep one of them",
        ) from None
    except yaml.YAMLError:
        return
    if config is None:
        raise ArgumentError(
            None,
            f"config file {path} is empty (nothing but blanks or comments): write its sections (data:, model:, "
            f"trainer:) in it, or leave out --config {path}",
        )

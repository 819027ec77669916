"""A DataModule's constructor built from its config dataclass: each argument declared once.

A pipeline's config dataclass (``DataConfig``, ``LMConfig``) declares every argument once: its
name, type, default and docstring. :func:`config_constructor` turns it into the DataModule's
``__init__``, as :mod:`dataclasses` builds a dataclass's own: a real function (generated source,
like the standard library's) whose signature LightningCLI and jsonargparse read for the YAML
schema and ``--help``, and whose frame Lightning's ``save_hyperparameters`` reads, with one
keyword per public field (``metadata={"internal": True}`` fields are set by the class, not by
users) in the order the DataModule has always taken them positionally.

That order is read from the fields too (:func:`positional_order`): the config's fields in the
order they are declared (the base's first), each new field after the one declared before it,
except where a field's declaration says :func:`after` (``metadata=after("enforce")``): it, and
the fields declared after it, go there. So a new field declared last is the constructor's last
argument, and no call that passes arguments by position changes meaning.

What the tools see: the runtime signature is generated; ``mypy`` sees the config class's own
``__init__`` through the decorator's :class:`~typing.ParamSpec` (the same names, types and
defaults, read from the same declaration). The configs make their later fields keyword-only
(``KW_ONLY``), so ``mypy`` accepts exactly the positional prefix the configs and the DataModule
share and no positional use that would put a value in another argument.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec

__all__ = ["AFTER", "after", "config_constructor", "constructor_fields", "positional_order"]

P = ParamSpec("P")

#: How the DataModule's body sees the arguments: ``build(self, arguments)``, after Lightning's init.
Build = Callable[[Any, dict[str, Any]], None]


#: The metadata key of :func:`after`: the argument a field follows in the constructor's positional order.
AFTER = "positional_after"


def after(name: str, metadata: Mapping[str, Any] = MappingProxyType({})) -> Mapping[str, Any]:
    """A field's metadata: it follows the argument ``name`` in the DataModule's positional order.

    Args:
        name: the field (or extra argument) it comes after.
        metadata: the field's other metadata (``SERVES``, ``shapes(...)``), kept.
    """
    return MappingProxyType({**metadata, AFTER: name})


def constructor_fields(config: type) -> list[str]:
    """The config fields that are constructor arguments (all but the ``internal`` ones)."""
    return [f.name for f in fields(config) if not f.metadata.get("internal")]


def positional_order(
    config: type, extra: Sequence[str] = (), moved: Mapping[str, str] = MappingProxyType({})
) -> tuple[str, ...]:
    """The constructor's positional order, read from ``config``'s fields (see the module).

    Each public field in declaration order (a base class's first) goes right after the argument
    placed before it, or after the one its :func:`after` names; ``extra`` arguments (no config
    field) go last, unless a field is placed after one of them. ``moved`` then places a base
    class's field (or an extra argument) after another, in its order: how a DataModule keeps a
    positional order it published before a base field was declared where it is.

    Raises:
        TypeError: an :func:`after` or ``moved`` names no earlier argument.
    """
    order: list[str] = [*extra]
    cursor = 0
    for item in fields(config):
        if item.metadata.get("internal"):
            continue
        anchor = item.metadata.get(AFTER)
        if anchor is not None:
            if anchor not in order:
                raise TypeError(
                    f"{config.__name__}.{item.name}: after({anchor!r}) names no argument placed before it; "
                    f"placed so far: {order}"
                )
            cursor = order.index(anchor) + 1
        order.insert(cursor, item.name)
        cursor += 1
    for name, anchor in moved.items():
        if name not in order or anchor not in order:
            raise TypeError(
                f"{config.__name__}: moved {name!r} after {anchor!r}, but the arguments are {order}"
            )
        order.remove(name)
        order.insert(order.index(anchor) + 1, name)
    return tuple(order)


def config_constructor(
    config: Callable[P, Any],
    order: Sequence[str] | None = None,
    extra: Mapping[str, inspect.Parameter] = MappingProxyType({}),
) -> Callable[[Build], Callable[Concatenate[Any, P], None]]:
    """Decorates ``__init__(self, arguments)``: the ``__init__`` taking ``config``'s fields as keywords.

    The generated ``__init__`` calls Lightning's ``__init__`` and ``save_hyperparameters`` (the
    arguments in ``extra`` are not hyperparameters: they are objects, not config values; nor is a
    field declared ``repr=False``, a secret such as ``storage_options``), then
    ``build(self, {name: value})`` with every argument.

    Args:
        config: the config dataclass whose public fields are the arguments.
        order: every argument's name, in the positional order of the constructor; ``None``:
            :func:`positional_order` of ``config`` (the order declared with the fields).
        extra: arguments that are no config field (``pipeline``), with their parameter.

    Raises:
        TypeError: ``order`` is not exactly the public fields and ``extra`` (at class creation).
    """

    def decorate(build: Build) -> Callable[Concatenate[Any, P], None]:
        chosen = positional_order(typing.cast(type, config), tuple(extra)) if order is None else order
        return typing.cast(Callable[Concatenate[Any, P], None], _Constructor(config, chosen, extra, build))

    return decorate


class _Constructor:
    """Stands in the class body until the class exists, then puts the generated ``__init__`` there."""

    def __init__(
        self, config: Any, order: Sequence[str], extra: Mapping[str, inspect.Parameter], build: Build
    ) -> None:
        self.config, self.order, self.extra, self.build = config, tuple(order), dict(extra), build

    def __set_name__(self, owner: type, name: str) -> None:
        # The defining class is known only now; Lightning's hyperparameter collection reads it
        # from the frame (``__class__``), as it does for any hand-written ``__init__``.
        setattr(owner, name, _generate(owner, self.config, self.order, self.extra, self.build))


def _parameters(
    config: Any, order: tuple[str, ...], extra: Mapping[str, inspect.Parameter]
) -> list[inspect.Parameter]:
    public = constructor_fields(config)
    if sorted(order) != sorted([*public, *extra]):
        raise TypeError(
            f"{config.__name__}: the constructor order {list(order)} must name each public field "
            f"{public} and extra argument {list(extra)} once"
        )
    hints = typing.get_type_hints(config)
    by_name = {f.name: f for f in fields(config)}
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name in order:
        if name in extra:
            parameters.append(extra[name])
            continue
        item = by_name[name]
        default = item.default if item.default is not MISSING else item.default_factory()  # type: ignore[misc]
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hints[name]
            )
        )
    return parameters


def _generate(
    owner: type, config: Any, order: tuple[str, ...], extra: Mapping[str, inspect.Parameter], build: Build
) -> Any:
    parameters = _parameters(config, order, extra)
    defaults = {p.name: p.default for p in parameters[1:]}
    arguments = ", ".join(f"{name}=__defaults__[{name!r}]" for name in order)
    passed = ", ".join(f"{name!r}: {name}" for name in order)
    # Generated like a dataclass's __init__: real parameters, so the frame holds each argument
    # by name (Lightning's save_hyperparameters reads them there) and no locals() is needed.
    source = (
        "def __create__(__class__, __defaults__, __build__, __ignore__):\n"
        f"    def __init__(self, {arguments}):\n"
        "        super(__class__, self).__init__()\n"
        "        self.save_hyperparameters(logger=False, ignore=__ignore__)\n"
        f"        __build__(self, {{{passed}}})\n"
        "    return __init__\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{owner.__qualname__}.__init__ from {config.__name__}>", "exec"), {}, namespace)
    # A field declared repr=False (storage_options: credentials) is no hyperparameter: Lightning
    # would write it to hparams.yaml and into every checkpoint.
    secret = [f.name for f in fields(config) if not f.repr and f.name in order]
    init = namespace["__create__"](owner, defaults, build, [*extra, *secret])
    init.__qualname__ = f"{owner.__qualname__}.__init__"
    init.__module__ = owner.__module__
    init.__doc__ = build.__doc__
    init.__signature__ = inspect.Signature(parameters, return_annotation=None)
    init.__annotations__ = {p.name: p.annotation for p in parameters[1:]} | {"return": None}
    return init

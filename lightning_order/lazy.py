"""Names a package exports without importing their modules until first use (PEP 562).

A package lists ``name -> module`` once and gets its ``__getattr__`` and ``__dir__`` from
:func:`lazy_exports`, so importing it stays light (no torch, no Lightning) until a name is used.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which exports each name of ``table`` from its module.

    Args:
        package: the package's ``__name__``.
        table: public name -> the module that defines it.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__

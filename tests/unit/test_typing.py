"""The typed public API: ``mypy`` (strict on the public modules, ``[tool.mypy]`` in pyproject.toml)
passes, type checkers see every lazy public name, and ``py.typed`` ships."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import lightning_order

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _type_checking_imports() -> dict[str, str]:
    """``name -> module`` of the ``from module import name as name`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse((ROOT / "lightning_order" / "__init__.py").read_text())
    blocks = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    assert len(blocks) == 1, "one `if TYPE_CHECKING:` block in lightning_order/__init__.py"
    found: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: write `import {alias.name} as {alias.name}`"
            found[alias.name] = node.module or ""
    return found


def test_type_checkers_see_every_lazy_public_name_from_its_module():
    assert _type_checking_imports() == lightning_order._LAZY


def test_py_typed_ships_with_the_package():
    assert (ROOT / "lightning_order" / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["lightning_order"]


def test_mypy_files_are_the_public_modules():
    """The strict check covers ``__init__.py`` and every module that defines a public name."""
    files = set(_pyproject()["tool"]["mypy"]["files"])
    defining = {
        getattr(lightning_order, name).__module__ for name in lightning_order.__all__ if name != "RULES"
    }
    defining |= set(lightning_order._LAZY.values()) | {"lightning_order"}
    for module in sorted(defining):
        path = Path(*module.split("."))
        expected = path / "__init__.py" if (ROOT / path).is_dir() else path.with_suffix(".py")
        assert expected.as_posix() in files, f"{module}: add {expected.as_posix()} to [tool.mypy] files"


@pytest.mark.slow
def test_mypy_strict_passes_on_the_public_modules():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr

"""No test-only code in the package: every public function and class of ``lightning_order/`` is used by it.

A top-level public function or class of a module must be referenced somewhere in the package
(another module, or its own), in ``benchmarks/`` or ``examples/``, or be exported by name (a lazy
export map, a spec's ``"module:attribute"``). One that only tests call is a test helper: it lives
in ``tests/``; one nothing calls is deleted (issue #44 moved ``deduplicate``, ``straddling_pairs``,
``clusters_removed`` and ``check_params`` to ``tests/dedup_reference.py`` and deleted
``allocate_array``, ``twin_windows`` and ``shifts_labels_itself``). Read with ``ast``, nothing imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT

#: What may use the package's names besides the package itself.
USERS = ("benchmarks", "examples")


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for folder in ("lightning_order", *USERS):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


def _all_strings(tree: ast.Module) -> set[int]:
    """The ids of the string nodes of ``__all__`` and of docstrings (they name, they do not use)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            skip |= {id(n) for n in ast.walk(node.value)}
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))
    return skip


def _references(tree: ast.Module) -> set[str]:
    """Every name ``tree`` uses: names, attributes, imported names and ``"module:attribute"`` strings."""
    skip = _all_strings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found.add(node.value.rpartition(":")[2].rpartition(".")[2])
    return found


def test_every_public_function_and_class_of_the_package_is_used_outside_tests() -> None:
    sources = list(_sources())
    used = set().union(*(_references(tree) for _, tree in sources))
    unused = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
        for path, tree in sources
        if path.is_relative_to(ROOT / "lightning_order")
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and not node.name.startswith("_")
        and node.name not in used
    ]
    assert unused == [], "used only by tests (move them to tests/) or by nothing (delete them)"

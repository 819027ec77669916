"""The package's shape, read with ``ast``: no import cycles, no borrowed private names.

STYLE.md §12: helpers have a home and a public name. There is no line cap: a module is as long
as its concept needs (STYLE.md §15; issue #44 retires the 450-line rule, which made splits, not
concepts). These tests
read every module of ``lightning_order/`` without importing it:

- an import cycle between modules fails. Imports inside ``if TYPE_CHECKING:`` are ignored (they
  never run); imports inside functions count (they run, later, and still tie the modules), and so
  do ``importlib.import_module("<literal>")`` and ``__import__("<literal>")`` calls. An
  edge goes to the module an import names (``from a.b import c`` names ``a.b.c`` when that is a
  module, else ``a.b``), not to the packages above it;
- ``from a.b import _x`` of another module's underscore name fails (aliasing a public module
  to a private name, ``from a import cache as _cache``, is fine).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT as REPOSITORY

PACKAGE = "lightning_order"
ROOT = REPOSITORY / PACKAGE

# Known offenders (none): an entry here must name a module that still offends (the tests below
# fail on a stale entry, so a fixed offender cannot stay allowed).
ALLOWED_CYCLES: set[frozenset[str]] = set()
ALLOWED_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _dynamic_import(node: ast.AST) -> ast.Import | None:
    """``importlib.import_module("a.b")`` or ``__import__("a.b")`` with a literal name, as ``import a.b``.

    A dynamic import is still a dependency: read as an import, it cannot hide a cycle.
    """
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    name = node.args[0].value
    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if called not in ("import_module", "__import__") or not isinstance(name, str):
        return None
    return ast.Import(names=[ast.alias(name=name)])


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import under ``node``, at any depth, except the bodies of ``if TYPE_CHECKING:``.

    ``importlib.import_module("<literal>")`` and ``__import__("<literal>")`` calls count as imports.
    """
    for child in ast.iter_child_nodes(node):
        dynamic = _dynamic_import(child)
        if dynamic is not None:
            yield dynamic
            yield from _imports(child)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for orelse in child.orelse:  # the `else:` branch runs
                yield from _imports(ast.Module(body=[orelse], type_ignores=[]))
        else:
            yield from _imports(child)


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` reads from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _edges(module: str) -> Iterator[tuple[str, str | None]]:
    """``(imported module, imported name or None)`` for every import of ours in ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, None
            continue
        source = _absolute(module, node)
        if source.split(".")[0] != PACKAGE:
            continue
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            yield (submodule, None) if submodule in MODULES else (source, alias.name)


def _graph() -> dict[str, set[str]]:
    return {m: {target for target, _ in _edges(m) if target in MODULES and target != m} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
    return "{" + ", ".join(sorted(component)) + "}: " + "; ".join(edges)


def test_the_walk_sees_the_package() -> None:
    assert "lightning_order.callbacks.validator.callback" in MODULES
    assert "lightning_order.checks.symptoms" in MODULES
    graph = _graph()
    assert "lightning_order.checks.report" in graph["lightning_order.callbacks.validator.callback"]


def test_the_walk_sees_a_dynamic_import_with_a_literal_name() -> None:
    tree = ast.parse('import importlib\ndef f():\n    importlib.import_module("lightning_order.order")\n')
    assert [ast.unparse(node) for node in _imports(tree)] == ["import importlib", "import lightning_order.order"]


def test_no_import_cycles_between_modules() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    offending = [_describe(c, graph) for c in cycles if c not in ALLOWED_CYCLES]
    assert not offending, "import cycles between modules:\n  " + "\n  ".join(offending)
    stale = sorted(", ".join(sorted(c)) for c in ALLOWED_CYCLES - set(cycles))
    assert not stale, f"allowed cycles that are gone (remove them from ALLOWED_CYCLES): {stale}"


def _private_imports() -> list[tuple[str, str]]:
    found = []
    for module in MODULES:
        for source, name in _edges(module):
            if name is not None and name.startswith("_") and not name.startswith("__"):
                found.append((module, f"{source}.{name}"))
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = _private_imports()
    offending = [f"{m} imports {name}" for m, name in found if (m, name) not in ALLOWED_PRIVATE_IMPORTS]
    assert not offending, "underscore names imported across modules:\n  " + "\n  ".join(offending)
    stale = sorted(ALLOWED_PRIVATE_IMPORTS - set(found))
    assert not stale, (
        f"allowed private imports that are gone (remove them from ALLOWED_PRIVATE_IMPORTS): {stale}"
    )


def test_no_private_modules_outside_the_package_entry_points() -> None:
    private = [
        m for m, p in MODULES.items() if p.stem.startswith("_") and p.stem not in ("__init__", "__main__")
    ]
    assert not private, f"modules named with an underscore (give them a public name): {private}"

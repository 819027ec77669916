"""docs/architecture.md's path of a ``block_size`` is the code's: the value followed through the AST, not the name.

The analysis (:func:`follow`) reads every module of the package and follows the value, not the
word: it starts where the value can be read (an attribute ``.block_size``, a key ``["block_size"]``
or ``.get("block_size")``, a parameter ``block_size``) and follows it through assignments, tuple
unpacking, keyword and positional arguments of the package's own functions and classes, and dict
literals; the value plus or minus a constant (``block_size + 1``) and ``int(...)`` of it are still
the value. Every place that holds it under another name (``width = cfg.block_size + 1``,
``{"width": ...}``, ``f(width=...)``, a parameter ``width`` given it by position) is a rename.
Where it enters a computation (a product, a comparison, a string, a call outside the package)
it is *used*. A module *hands it on* when it passes it to another module's function or class,
puts it in a dict (a record, a manifest), returns it, or stores it on an object; one that only
uses it ends a branch. The dims of a pipeline travel by name (the spec's ``dims``, the
manifest's ``info["dims"]``): the spec that declares the name is on the path, and the generic
code that moves every dim alike names none (checked).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lightning_order"
SECTION = "## The path of a `block_size` from the YAML to the model"
VALUE = "block_size"
#: Modules naming a ``block_size`` that is another quantity (not the LM's sequence length).
UNRELATED = {"data/engine/reading.py": "pyarrow's ReadOptions(block_size=...): bytes per CSV read"}
#: Functions that check any field, named by their first argument: the value enters them as ``value``
#: and leaves as the field it was (``check_int("block_size", self.block_size, ...)``).
CHECKERS = {"check_int"}
#: The generic carriers: they move the config object, the arguments or every dim alike, by a
#: variable, so they must name no ``block_size`` themselves.
GENERIC = (
    "data/engine/arguments.py",
    "data/engine/config.py",
    "data/engine/datamodule.py",
    "data/engine/runner.py",
    "data/lm/prepare.py",
    "cli/lightning.py",
)
#: At most this many files from the YAML to the model (the YAML included) hand the value on.
MOST_FILES = 8


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


@functools.cache
def _modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _parameters(modules: dict[str, ast.Module]) -> dict[str, list[list[str]]]:
    """Each function or class of the package by name: its positional parameters (a class: its ``__init__``'s or its fields)."""
    found: dict[str, list[list[str]]] = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
                found.setdefault(node.name, []).append(
                    names[1:] if names[:1] in (["self"], ["cls"]) else names
                )
            elif isinstance(node, ast.ClassDef):
                init = next(
                    (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
                )
                if init is not None:
                    found.setdefault(node.name, []).append([a.arg for a in init.args.args[1:]])
                else:  # a dataclass: its annotated fields, in order
                    found.setdefault(node.name, []).append(
                        [
                            n.target.id
                            for n in node.body
                            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                        ]
                    )
    return found


def _callee(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


@dataclass
class Flow:
    """What :func:`follow` found: where the value is held, renamed, handed on, and named by the dims."""

    held: set[str] = field(default_factory=set)
    handed_on: set[str] = field(default_factory=set)
    renames: list[str] = field(default_factory=list)
    dims: set[str] = field(default_factory=set)


class _Scope(ast.NodeVisitor):
    """One function (or a module's top level): the names that hold the value, found to a fixpoint."""

    def __init__(
        self, module: str, own: set[str], parameters: dict[str, list[list[str]]], flow: Flow
    ) -> None:
        self.module, self.own, self.parameters, self.flow = module, own, parameters, flow
        self.names: set[str] = {VALUE}

    # -- what carries the value ----------------------------------------------------------------
    def carried(self, node: ast.AST | None) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == VALUE
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == VALUE
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return (self.carried(node.left) and isinstance(node.right, ast.Constant)) or (
                self.carried(node.right) and isinstance(node.left, ast.Constant)
            )
        if isinstance(node, ast.Call):
            if _callee(node) == "get" and node.args and isinstance(node.args[0], ast.Constant):
                return node.args[0].value == VALUE
            return _callee(node) == "int" and len(node.args) == 1 and self.carried(node.args[0])
        return False

    def rename(self, node: ast.AST, name: str) -> None:
        if name != VALUE:
            self.flow.renames.append(f"{self.module}:{node.lineno}: held as {name!r}")

    # -- where it goes ----------------------------------------------------------------------------
    def bind(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
            for t, v in zip(target.elts, value.elts):
                self.bind(t, v)
        elif self.carried(value):
            if isinstance(target, ast.Name):
                self.rename(target, target.id)
                self.names.add(target.id)
            elif isinstance(target, ast.Attribute):
                self.rename(target, target.attr)
                self.flow.handed_on.add(self.module)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.bind(target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.bind(node.target, node.value)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values):
            if self.carried(value):
                self.rename(value, key.value if isinstance(key, ast.Constant) else ast.unparse(key))
                self.flow.handed_on.add(self.module)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if self.carried(node.value):
            self.flow.handed_on.add(self.module)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _callee(node)
        package = name in self.parameters
        for keyword in node.keywords:
            if keyword.arg is not None and self.carried(keyword.value):
                self.rename(keyword.value, keyword.arg)
                if package:
                    self.flow.handed_on.add(self.module)
        for i, arg in enumerate(node.args):
            if not self.carried(arg) or not package or name in CHECKERS:
                continue
            if name not in self.own:
                self.flow.handed_on.add(self.module)
            for params in self.parameters[name]:
                if i < len(params):
                    self.rename(arg, params[i])
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        pass  # a scope of its own

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]


def _held(scope: _Scope, body: list[ast.stmt]) -> bool:
    for statement in body:
        for node in ast.walk(statement):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node is not statement
            ):
                continue
            if isinstance(node, ast.expr) and scope.carried(node):
                return True
    return False


def follow() -> Flow:
    """The value's flow through the package (see the module)."""
    modules = _modules()
    parameters = _parameters(modules)
    flow = Flow()
    for module, tree in modules.items():
        # The value enters a module only under its name (an attribute, a key, a parameter); a rename
        # is caught where it happens, in a module that names it.
        if module in UNRELATED or VALUE not in (PACKAGE / module).read_text(encoding="utf-8"):
            continue
        own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        scopes: list[list[ast.stmt]] = [tree.body]
        scopes += [n.body for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for body in scopes:
            scope = _Scope(module, own, parameters, Flow())
            for _ in range(3):  # names bound late in a body (a loop) reach a fixpoint quickly
                for statement in body:
                    if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        scope.visit(statement)
            if _held(scope, body):
                flow.held.add(module)
            flow.handed_on |= scope.flow.handed_on
            flow.renames += [r for r in dict.fromkeys(scope.flow.renames) if r not in flow.renames]
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "dims"
                and isinstance(node.value, (ast.Tuple, ast.List))
            ):
                if any(isinstance(e, ast.Constant) and e.value == VALUE for e in node.value.elts):
                    flow.dims.add(module)
    return flow


FLOW = follow()


def _section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def _table_files() -> list[str]:
    rows = [line for line in _section().splitlines() if re.match(r"\| \d+ \|", line)]
    return [re.findall(r"`([^`]+\.(?:py|yaml))`", row.split("|")[2])[0] for row in rows]


def _ends() -> set[str]:
    line = next(line for line in _section().splitlines() if line.startswith("Ends of a branch"))
    return set(re.findall(r"`([\w/]+\.py)`", line))


def _path() -> set[str]:
    """The modules that hand the value on, the spec that names the dim, the declaration and the model."""
    return FLOW.handed_on | FLOW.dims | {"data/lm/config.py", "models/causal_lm.py"}


def test_the_value_is_never_renamed():
    """``width = cfg.block_size + 1``, ``{"width": ...}``, ``f(width=...)``: each is a rename (issue #44 item 4)."""
    assert FLOW.renames == []


def test_the_table_is_the_path_the_value_takes_in_at_most_eight_files():
    files = _table_files()
    assert files[0] == "configs/lm-demo.yaml" and files[1] == "data/lm/config.py"
    assert files[-1] == "models/causal_lm.py"
    assert len(files) <= MOST_FILES, files
    assert set(files[1:]) == _path(), (
        f"docs/architecture.md ('{SECTION[3:]}') lists {files[1:]}; the value is handed on by {sorted(_path())}"
    )


def test_every_module_that_holds_the_value_is_in_the_path_or_ends_a_branch():
    assert FLOW.held - _path() == _ends(), (
        f"held but handing it to no one: {sorted(FLOW.held - _path())}; the section's 'Ends of a branch' "
        f"line names {sorted(_ends())}"
    )


@pytest.mark.parametrize("module", GENERIC)
def test_the_generic_carriers_name_no_block_size(module: str):
    """They move the config object, the arguments or every dim alike; naming one would be a hop of its own."""
    tree = _modules()[module]
    docs = _docstrings(tree)
    named = [
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value == VALUE and id(node) not in docs)
        or (isinstance(node, ast.Attribute) and node.attr == VALUE)
        or (isinstance(node, ast.Name) and node.id == VALUE)
        or (isinstance(node, (ast.keyword, ast.arg)) and getattr(node, "arg", None) == VALUE)
    ]
    assert named == [] and module not in FLOW.held, f"{module} names block_size at lines {named}"
    assert module in _section(), f"docs/architecture.md ('{SECTION[3:]}') does not name the carrier {module}"


def test_the_analysis_sees_a_rename_a_hand_on_and_a_use():
    """The analysis itself, on a small module: it must catch what the path test relies on."""
    tree = ast.parse(
        "def pack(cfg):\n"
        "    width = cfg.block_size + 1\n"
        "    item = {'block_size': cfg.block_size}\n"
        "    blocks = tokens.reshape(-1, width)\n"
        "    return write(out, width=width)\n"
    )
    flow = Flow()
    scope = _Scope("m.py", {"pack"}, {"write": [["out", "width"]]}, flow)
    for _ in range(2):
        for statement in tree.body[0].body:
            scope.visit(statement)
    assert flow.renames[:2] == ["m.py:2: held as 'width'", "m.py:5: held as 'width'"]
    assert flow.handed_on == {"m.py"} and "width" in scope.names


def test_every_file_the_section_names_exists():
    modules = _modules()
    stale = sorted(
        name
        for name in set(re.findall(r"`([\w/]+\.py)`", _section()))
        if name not in modules and not name.startswith("tests/")
    )
    assert not stale, f"docs/architecture.md ('{SECTION[3:]}') names files the package no longer has: {stale}"
    assert (ROOT / "configs" / "lm-demo.yaml").is_file()


def test_every_module_whose_code_names_block_size_holds_it():
    """A ``"block_size"`` in code (not a docstring) that the analysis does not see holding the value is a channel it misses."""
    unseen = []
    for name, tree in _modules().items():
        docs = _docstrings(tree)
        if any(
            isinstance(n, ast.Constant) and n.value == VALUE and id(n) not in docs for n in ast.walk(tree)
        ):
            if name not in FLOW.held | FLOW.dims | set(UNRELATED):
                unseen.append(name)
    assert unseen == []


#: Every dim a model is built from (the specs' dims).
DIMS = ("block_size", "vocab_size", "padded_vocab_size", "num_features", "num_classes", "max_length")


@pytest.mark.parametrize("dim", DIMS)
def test_no_module_computes_a_dim_back(dim: str):
    """A dim is only ever assigned forward (from the config, the tokenizer, the labels), never from ``x - 1``."""
    backwards = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            values = []
            if isinstance(node, ast.Dict):
                values = [
                    v
                    for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value == dim
                ]
            elif isinstance(node, ast.keyword) and node.arg == dim:
                values = [node.value]
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == dim for t in node.targets
            ):
                values = [node.value]
            backwards += [
                f"{name}:{v.lineno}" for v in values if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Sub)
            ]
    assert backwards == []

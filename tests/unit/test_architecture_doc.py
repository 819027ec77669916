"""docs/architecture.md's path of a ``block_size`` is the code's: checked, not trusted.

The table lists the files that hand the value on from the YAML to the model (at most 6); every
module of the package whose code names ``block_size`` is either in it or named beside it as a file
that only reads it; and no module computes a ``block_size`` back from something else
(``width - 1``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lightning_order"
SECTION = "## The path of a `block_size` from the YAML to the model"
#: Modules naming a ``block_size`` that is another quantity (not the LM's sequence length).
UNRELATED = {"data/engine/reading.py": "pyarrow's ReadOptions(block_size=...): bytes per CSV read"}


def _section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def _table_files() -> list[str]:
    rows = [line for line in _section().splitlines() if re.match(r"\| \d+ \|", line)]
    return [re.findall(r"`([^`]+\.py)`", row.split("|")[2])[0] for row in rows]


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def _names_block_size(path: Path) -> bool:
    """The code (not docstrings, not comments) names ``block_size``: a name, attribute, keyword, parameter or key."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "block_size":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "block_size":
            return True
        if isinstance(node, (ast.keyword, ast.arg)) and getattr(node, "arg", None) == "block_size":
            return True
        if isinstance(node, ast.Constant) and node.value == "block_size" and id(node) not in docs:
            return True
    return False


def _modules() -> dict[str, Path]:
    return {path.relative_to(PACKAGE).as_posix(): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_path_has_at_most_six_files_each_naming_the_value():
    files = _table_files()
    assert 1 <= len(files) <= 6, files
    modules = _modules()
    for name in files:
        assert name in modules, f"{name} in docs/architecture.md is no module of the package"
        assert _names_block_size(modules[name]), f"{name} is in the path table but never names block_size"


def test_every_module_naming_block_size_is_in_the_path_or_named_as_a_reader():
    named = set(re.findall(r"`([\w/]+\.py)`", _section()))
    naming = {name for name, path in _modules().items() if _names_block_size(path)}
    undocumented = naming - named - set(UNRELATED)
    assert not undocumented, (
        f"{sorted(undocumented)} name block_size but docs/architecture.md ('{SECTION[3:]}') does not: "
        "add the file to the table if it hands the value on, or beside it if it only reads it"
    )


def test_every_file_the_section_names_exists():
    modules = _modules()
    stale = sorted(
        name
        for name in set(re.findall(r"`([\w/]+\.py)`", _section()))
        if name not in modules and not name.startswith("tests/")
    )
    assert not stale, f"docs/architecture.md ('{SECTION[3:]}') names files the package no longer has: {stale}"


def test_the_path_ends_at_the_model_and_starts_at_the_declaration():
    files = _table_files()
    assert files[0] == "data/lm/config.py" and files[-1] == "models/causal_lm.py"


#: Every dim a model is built from (the specs' dims).
DIMS = ("block_size", "vocab_size", "padded_vocab_size", "num_features", "num_classes", "max_length")


@pytest.mark.parametrize("dim", DIMS)
def test_no_module_computes_a_dim_back(dim: str):
    """A dim is only ever assigned forward (from the config, the tokenizer, the labels), never from ``x - 1``."""
    backwards = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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

"""The README's set-up commands are the ones CI runs, and its example uses only public names.

The example run as written: tests/integration/test_readme_example.py.
"""

from __future__ import annotations

import ast
import re

from helpers import ROOT

import lightning_order

INSTALL_AND_RUN = 'pip install -e ".[dev]" && lightning-order fit --config configs/demo.yaml'


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_them():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, flags=re.S).group(1).strip().splitlines()
    assert first_block == [INSTALL_AND_RUN, "pytest"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert INSTALL_AND_RUN in ci and "pytest" in ci
    assert "pip install torch==2.13.0" in ci


def test_readme_examples_parse_and_import_public_names_only():
    readme = (ROOT / "README.md").read_text()
    for block in _python_blocks(readme):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "lightning_order":
                for alias in node.names:
                    assert alias.name in lightning_order.__all__, alias.name

"""Tests of lightning_order.rules: the stable rule codes, Violation and its plain-data round trip,
and that the module is a leaf (imports nothing from the package)."""

from __future__ import annotations

import ast
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_order
from lightning_order.errors import OrderError
from lightning_order.rules import RULES, Violation

RULES_PY = Path(lightning_order.__file__).with_name("rules.py")

# lightning_order/rules.py (RULES): tests and users match on these codes; a code may be added, never renamed.
STABLE_CODES = [
    "missing-step",
    "out-of-order",
    "stale-input",
    "vocab-before-clean",
    "fit-before-split",
    "shard-before-normalize",
    "init-before-data",
    "train-val-overlap",
    "rank-mismatch",
    "resume-data-changed",
    "resume-position",
    "cycle",
]


def test_every_stable_code_is_a_rule() -> None:
    assert set(STABLE_CODES) <= set(RULES)


def test_one_import_path_for_the_public_names() -> None:
    assert lightning_order.Violation is Violation and lightning_order.RULES is RULES
    assert Violation.__module__ == "lightning_order.rules"


@pytest.mark.parametrize("code", sorted(RULES))
def test_every_rule_has_a_title_symptom_and_fix(code: str) -> None:
    rule = RULES[code]
    assert rule.title and rule.symptom and rule.fix
    violation = Violation(code, ("a",), "message")
    assert violation.symptom == rule.symptom and violation.fix == rule.fix
    assert code in violation.describe()


def test_shard_before_normalize_symptom_is_the_documented_one() -> None:
    assert "loss oscillates early" in RULES["shard-before-normalize"].symptom


def test_unknown_rule_code_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown rule code"):
        Violation("wrong-order", ("a",), "m")


def test_to_dict_keeps_details_and_round_trips_through_json() -> None:
    violation = Violation(
        "resume-data-changed",
        ["build_vocab"],
        "the vocabulary changed",
        fix="resume with the original data",
        details={"changed": ["vocab"], "stored": {"vocab": "a" * 32}},
    )
    data = violation.to_dict()
    assert data["details"] == {"changed": ["vocab"], "stored": {"vocab": "a" * 32}}
    back = Violation.from_dict(json.loads(json.dumps(data)))  # as an all-gather or a log sees it
    assert back == violation and back.steps == ("build_vocab",)
    assert back.details == violation.details and back.fix == "resume with the original data"


def test_from_dict_of_an_older_dict_without_details() -> None:
    back = Violation.from_dict({"rule": "cycle", "steps": ["a", "b"], "message": "m"})
    assert back.details == {} and back.symptom == RULES["cycle"].symptom


def test_order_error_of_violations_with_details_pickles() -> None:
    error = OrderError([Violation("cycle", ("a", "b", "a"), "m", details={"path": ["a", "b", "a"]})])
    again = pickle.loads(pickle.dumps(error))
    assert again.rules == ["cycle"] and again.violations[0].details == {"path": ["a", "b", "a"]}


def test_rules_module_imports_nothing_from_the_package() -> None:
    tree = ast.parse(RULES_PY.read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("lightning_order")]
    # Importing it alone loads no other module of the package (so errors, order and checks can
    # all depend on it without a cycle).
    code = (
        "import sys, importlib.util as u; s = u.spec_from_file_location('r', sys.argv[1]); "
        "m = sys.modules['r'] = u.module_from_spec(s); s.loader.exec_module(m); "
        "print(sorted(k for k in sys.modules if k.startswith('lightning_order')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(RULES_PY)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"

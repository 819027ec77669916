"""The rule reference (docs site page ``reference/rules.md``) is generated from ``RULES`` at every build.

Built by ``mkdocs_hooks.rules_page``; the strict site build itself runs in CI (``.ci/run``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType, SimpleNamespace

import pytest
from helpers import ROOT

from lightning_order import rules as rules_module
from lightning_order.rules import RULES, Rule


def _hooks() -> ModuleType:
    loaded = sys.modules.get("mkdocs_hooks")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mkdocs_hooks"] = module
    spec.loader.exec_module(module)
    return module


def _sections(page: str) -> dict[str, str]:
    parts = re.split(r"^## `([a-z-]+)`$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_rule_has_its_section_with_meaning_symptom_steps_fix_and_recovery() -> None:
    sections = _sections(_hooks().rules_page())
    assert list(sections) == list(RULES)
    for code, rule in RULES.items():
        text = " ".join(sections[code].split())
        for part in ("**What it means.**", "**If training went on.**", "**The steps.**", "**The fix.**", "**Recovery**"):
            assert part in text, (code, part)
        assert " ".join(rule.fix.split())[1:] in text, code  # the fix the code carries, verbatim
        assert " ".join(rule.symptom.split())[1:] in text, code


@pytest.mark.parametrize(
    ("code", "pair"),
    [
        ("vocab-before-clean", "`build_vocab` before `clean` (standard, lm)"),
        ("fit-before-split", "`fit_features` before `split` (standard)"),
        ("dedup-after-split", "`split` before `dedup` (lm)"),
        ("init-before-data", "`init_model` before `encode` (standard, lm)"),
    ],
)
def test_the_steps_of_an_order_rule_come_from_the_pipelines(code: str, pair: str) -> None:
    assert pair in _hooks().rule_steps(code)


def test_a_rule_found_from_evidence_names_no_step_pair() -> None:
    assert _hooks().rule_steps("labels-shifted-twice") == []
    assert "Found from evidence" in _sections(_hooks().rules_page())["labels-shifted-twice"]


def test_the_recovery_path_is_the_one_recover_takes() -> None:
    sections = _sections(_hooks().rules_page())
    assert "(path `init`)" in sections["init-before-data"]
    assert "(path `data`)" in sections["vocab-before-clean"]


def test_a_rule_added_to_the_code_appears_on_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page cannot go stale: it is rendered from the live RULES, not from a copy."""
    added = Rule("a rule added later", "nothing visible", "do the right thing")
    monkeypatch.setitem(rules_module.RULES, "added-later", added)
    page = _hooks().rules_page()
    assert "## `added-later`" in page and "Do the right thing." in page
    assert "| [`added-later`](#added-later) | a rule added later |" in page


def test_the_site_gets_the_page_from_the_hook(tmp_path) -> None:
    from mkdocs.structure.files import Files

    config = SimpleNamespace(
        site_dir=str(tmp_path / "site"), use_directory_urls=True, plugins=SimpleNamespace(_current_plugin=None)
    )
    files = _hooks().on_files(Files([]), config)
    page = files.get_file_from_path("reference/rules.md")
    assert page is not None and page.content_string.startswith("# Rules")


def test_links_to_the_benchmarks_page_are_relative_to_the_page() -> None:
    hooks = _hooks()
    link = "[figures](../../benchmarks/README.md#the-demo)"
    guide = SimpleNamespace(file=SimpleNamespace(src_uri="guide/get-started.md"))
    top = SimpleNamespace(file=SimpleNamespace(src_uri="lm.md"))
    assert hooks.on_page_markdown(link, guide, None, None) == "[figures](../benchmarks.md#the-demo)"
    assert hooks.on_page_markdown("[b](../benchmarks/README.md)", top, None, None) == "[b](benchmarks.md)"

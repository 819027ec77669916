"""References in the package's docstrings and the docs point at something in the repository.

A docstring or a page that cites a file the repository does not hold (a ``DESIGN.md`` kept
elsewhere, a test file since moved) sends a reader nowhere: each cited ``tests/``, ``docs/``,
``benchmarks/`` or ``examples/`` path must exist, and the design is cited through the docs that
say it (docs/architecture.md, docs/data.md, docs/lm.md...), never through a file outside.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT

#: Stale citations known and waiting for a fix (each must still be there: the test fails on a
#: fixed one, so the list cannot outlive them). None now.
KNOWN_STALE: set[str] = set()
#: A path to a file of the repository, as docstrings and pages write it.
_CITED = re.compile(r"\b((?:tests|docs|benchmarks|examples)/[\w./-]+\.(?:py|md|json|yaml))")


def _texts() -> Iterator[tuple[Path, str]]:
    for pattern in ("lightning_order/**/*.py", "docs/**/*.md", "README.md", "examples/*.py", "tests/**/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, path.read_text()


def test_no_reference_to_a_design_file_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    citing = [str(path.relative_to(ROOT)) for path, text in _texts() if "DESIGN.md" in text and path != here]
    assert citing == []


def test_every_cited_file_of_the_repository_exists() -> None:
    missing = sorted(
        f"{path.relative_to(ROOT)}: {cited}"
        for path, text in _texts()
        if not path.is_relative_to(ROOT / "tests")
        for cited in set(_CITED.findall(text))
        if not (ROOT / cited).exists() and not (ROOT / "docs" / cited).exists()
    )
    assert set(missing) - KNOWN_STALE == set(), "cite files the repository holds"
    assert KNOWN_STALE <= set(missing), "fixed: remove it from KNOWN_STALE"

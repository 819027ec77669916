"""The docs read as reference, not as a change log: no issue numbers, commit hashes or dates.

What the product does now, its options and its guarantees belong in README.md and docs/; when and
why it changed belongs in CHANGELOG.md, and how it was measured in benchmarks/README.md (dated by
the results files). A page may still link an upstream project's issue in the ``owner/repo#N`` or
``project#N`` form (``pytorch-lightning#19212``): that is a pointer to someone else's tracker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_MONTH = rf"(?:{_MONTHS}|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?)"
#: A history marker, by kind. An issue reference is ``#N`` or "issue N" unless a project name is
#: glued to it (``owner/repo#N``, ``project#N``); a commit is 7 to 40 hex digits holding both a
#: letter and a digit, outside code (where a fingerprint or a digest may be shown); a date is ISO or
#: a day and a month.
HISTORY = {
    "issue": re.compile(r"(?<![\w/.-])#\d+\b|\b[Ii]ssues? #?\d+\b|\bPR #?\d+\b"),
    "commit": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "date": re.compile(rf"\b20\d\d-\d\d-\d\d\b|\b\d{{1,2}} {_MONTH}(?!\w)|\b{_MONTH} \d{{1,2}}\b|\b{_MONTH} 20\d\d\b"),
}
_FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]+`")


def pages(root: Path = ROOT) -> list[Path]:
    """The pages a user reads as reference: README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]


def history_markers(text: str) -> list[tuple[int, str, str]]:
    """``(line, kind, text)`` of every history marker in a page's markdown."""
    # code keeps its lines (for the line numbers) but not its text, for the commit pattern only
    blank = _INLINE_CODE.sub(lambda m: " " * len(m[0]), _FENCED.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text))
    found = []
    for kind, pattern in HISTORY.items():
        for match in pattern.finditer(blank if kind == "commit" else text):
            found.append((text.count("\n", 0, match.start()) + 1, kind, match[0]))
    return sorted(found)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fixed in issue #35 on 4 December", [(1, "date", "4 December"), (1, "issue", "issue #35")]),
        ("see #42 and issues 34", [(1, "issue", "#42"), (1, "issue", "issues 34")]),
        ("before d44b59b's reading.py, 2026-12-03", [(1, "commit", "d44b59b"), (1, "date", "2026-12-03")]),
        ("on Dec 6", [(1, "date", "Dec 6")]),
        # an upstream tracker, a heading, an anchor, a colour, a fingerprint shown as code, a number
        ("Lightning-AI/pytorch-lightning#19212, pytorch-lightning#1", []),
        ("## 3 steps\n[the rules](#rules) `#1f77b4` `3fa4c2e1d9`\n```\nab12cd34ef\n```\n1000000 rows", []),
    ],
)
def test_history_markers_are_found_and_upstream_links_are_not(text: str, expected: list[tuple[int, str, str]]) -> None:
    assert history_markers(text) == sorted(expected)


def test_no_page_reads_as_a_change_log() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {kind} {text!r}"
        for path in pages()
        for line, kind, text in history_markers(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "history in the reference docs (say what the feature does now; the history goes to CHANGELOG.md, "
        "measurements to benchmarks/README.md):\n" + "\n".join(found)
    )

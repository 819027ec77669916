"""The figures the docs quote, each checked against the one file that generates it.

A benchmark or lab writes its results to ``benchmarks/results/<source>.json``::

    {"command": "...", "machine": "...", "date": "YYYY-MM-DD", "figures": {"key": value, ...}}

and a page quotes a figure by name, between two HTML comments (invisible on GitHub and on the
site)::

    validation perplexity <!--fig lm_demo.val_ppl:.2f-->82.84<!--/fig-->

``source.key`` names the figure; the optional format spec is Python's (``.2f``, ``,d``; a comma
it writes is the docs' thousands separator, a space). So a figure cannot go stale silently:
``tests/unit/test_figures.py`` fails when a quoted text differs from its generated value, and
after a benchmark is re-run, ``python benchmarks/figures.py --write`` rewrites every quote of it.

Usage::

    python benchmarks/figures.py           # lists the quotes that differ; exit code 1 if any
    python benchmarks/figures.py --write   # rewrites them from benchmarks/results/
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: The texts that quote figures: the README, the docs, the benchmarks' own page.
QUOTING = ("README.md", "docs/**/*.md", "benchmarks/README.md")
#: ``<!--fig source.key[:spec]-->text<!--/fig-->``
QUOTE = re.compile(r"<!--fig (?P<name>[\w-]+\.[\w.-]+?)(?::(?P<spec>[^>]*?))?-->(?P<text>.*?)<!--/fig-->", re.S)


@dataclass(frozen=True)
class Quote:
    """One quoted figure: where, what it names, what it says and what it should say."""

    path: str  # relative to the repository's root
    line: int
    name: str
    text: str
    expected: str | None  # None: the name is in no results file

    @property
    def stale(self) -> bool:
        return self.text != self.expected

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.expected is None:
            return f"{where}: {self.name} is in no file of benchmarks/results/"
        return f"{where}: {self.name} is quoted as {self.text!r}, generated {self.expected!r}"


def load_results(folder: Path = RESULTS) -> dict[str, Any]:
    """Every generated figure, by ``source.key`` (``source``: the results file's name)."""
    figures: dict[str, Any] = {}
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        for key, value in result["figures"].items():
            figures[f"{path.stem}.{key}"] = value
    return figures


def render(value: Any, spec: str | None) -> str:
    """``value`` as the docs write it: Python's format ``spec``, a comma written as a space."""
    return format(value, spec or "").replace(",", " ")


def quotes(text: str, path: str, figures: Mapping[str, Any]) -> Iterator[Quote]:
    """The quoted figures of ``text`` (the file at ``path``, relative to the root)."""
    for match in QUOTE.finditer(text):
        name, spec = match["name"], match["spec"]
        expected = render(figures[name], spec) if name in figures else None
        line = text.count("\n", 0, match.start()) + 1
        yield Quote(path, line, name, match["text"], expected)


def quoting_files(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in QUOTING for p in root.glob(pattern)})


def check(root: Path = ROOT, results: Path = RESULTS) -> list[Quote]:
    """Every quote in the docs (stale or not)."""
    figures = load_results(results)
    return [
        quote
        for path in quoting_files(root)
        for quote in quotes(path.read_text(encoding="utf-8"), str(path.relative_to(root)), figures)
    ]


def write(root: Path = ROOT, results: Path = RESULTS) -> list[Quote]:
    """Rewrites every stale quote that names a generated figure; returns those rewritten."""
    figures = load_results(results)
    changed: list[Quote] = []
    for path in quoting_files(root):
        text = path.read_text(encoding="utf-8")

        def fresh(match: re.Match[str]) -> str:
            name, spec = match["name"], match["spec"]
            if name not in figures:
                return match[0]
            value = render(figures[name], spec)
            return match[0].replace(f"-->{match['text']}<!--/fig-->", f"-->{value}<!--/fig-->")

        new = QUOTE.sub(fresh, text)
        if new != text:
            where = str(path.relative_to(root))
            changed += [q for q in quotes(text, where, figures) if q.stale and q.expected is not None]
            path.write_text(new, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite stale quotes from benchmarks/results/")
    args = parser.parse_args(argv)
    if args.write:
        for quote in write():
            print(f"rewritten: {quote}")
    found = check()
    stale = [q for q in found if q.stale]
    for quote in stale:
        print(quote)
    print(f"{len(found)} quoted figures, {len(stale)} stale", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

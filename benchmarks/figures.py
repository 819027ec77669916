"""The figures the docs quote, each checked against the one file that generates it.

A benchmark or lab writes its results to ``benchmarks/results/<source>.json``::

    {"command": "...", "machine": "...", "date": "YYYY-MM-DD", "figures": {"key": value, ...}}

and a page quotes a figure by name, between two HTML comments (invisible on GitHub and on the
site)::

    validation perplexity <!--fig lm_demo.val_ppl:.2f-->82.84<!--/fig-->

``source.key`` names the figure; the optional format spec is Python's (``.2f``, ``,d``; a comma
it writes is the docs' thousands separator, a space; ``%`` is written `` %``). A lab that writes its own results file
(:data:`LABS`: the order-error lab's ``docs/lab/results.json``, ...) is a source too, its figures
named by their path in it (``order_lab.summary.target-encoding.aggregate.rel_inflation_faulty.0``:
keys, list indices; ``#`` is a list's length). So a figure cannot go stale silently:
``tests/unit/test_figures.py`` fails when a quoted text differs from its generated value, and
after a benchmark is re-run, ``python benchmarks/figures.py --write`` rewrites every quote of it.

Usage::

    python benchmarks/figures.py           # lists the quotes that differ; exit code 1 if any
    python benchmarks/figures.py --write   # rewrites them from benchmarks/results/

``--write`` first runs ``benchmarks/derived.py``, which computes the figures derived from measured
ones (docs/scale.md's estimates) into their own results files.
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

import derived  # the figures computed from measured ones (docs/scale.md's estimates)

# Re-exported: every benchmark writes its results through ``from figures import write_results``.
from results_file import RESULTS, ROOT, command_line, flatten, machine, write_results  # noqa: F401

#: The texts that quote figures: the README, the docs, the benchmarks' own page.
QUOTING = ("README.md", "docs/**/*.md", "benchmarks/README.md")
#: Labs that write their own results files (with their command inside): source name -> file.
LABS = {
    "order_lab": ROOT / "docs" / "lab" / "results.json",
    "lm_lab": ROOT / "docs" / "lab" / "lm_results.json",
    "false_alarms": ROOT / "docs" / "lab" / "false_alarms.json",
}
#: ``<!--fig source.key[:spec]-->text<!--/fig-->``
QUOTE = re.compile(r"<!--fig (?P<name>[\w-]+\.[\w.#-]+?)(?::(?P<spec>[^>]*?))?-->(?P<text>.*?)<!--/fig-->", re.S)


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


class Figures(dict):  # type: ignore[type-arg]
    """The flat figures of ``benchmarks/results/`` (``source.key``), and the labs' files by path."""

    def __init__(self, flat: dict[str, Any], labs: dict[str, Any]) -> None:
        super().__init__(flat)
        self.labs = labs

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or self._walk(str(name)) is not _MISSING

    def __getitem__(self, name: str) -> Any:
        if super().__contains__(name):
            return super().__getitem__(name)
        value = self._walk(name)
        if value is _MISSING:
            raise KeyError(name)
        return value

    def _walk(self, name: str) -> Any:
        source, _, path = name.partition(".")
        if source not in self.labs:
            return _MISSING
        value = self.labs[source]
        for part in path.split("."):
            if part == "#" and isinstance(value, list):
                value = len(value)
            elif isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return _MISSING
        return value


_MISSING = object()


def load_results(folder: Path = RESULTS, labs: dict[str, Path] | None = None) -> Figures:
    """Every generated figure: ``source.key`` from ``folder``'s files, and the labs' files by path."""
    figures: dict[str, Any] = {}
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        for key, value in result["figures"].items():
            figures[f"{path.stem}.{key}"] = value
    read = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in (LABS if labs is None else labs).items() if path.is_file()}
    return Figures(figures, read)


def render(value: Any, spec: str | None) -> str:
    """``value`` as the docs write it: Python's format ``spec``, a comma written as a space (the
    thousands separator), a space before a percent sign."""
    return format(value, spec or "").replace(",", " ").replace("%", " %")


def quotes(text: str, path: str, figures: Mapping[str, Any]) -> Iterator[Quote]:
    """The quoted figures of ``text`` (the file at ``path``, relative to the root)."""
    for match in QUOTE.finditer(text):
        name, spec = match["name"], match["spec"]
        expected = render(figures[name], spec) if name in figures else None
        line = text.count("\n", 0, match.start()) + 1
        yield Quote(path, line, name, match["text"], expected)


def quoting_files(root: Path = ROOT) -> list[Path]:
    return sorted({p for pattern in QUOTING for p in root.glob(pattern)})


def check(root: Path = ROOT, results: Path = RESULTS, labs: dict[str, Path] | None = None) -> list[Quote]:
    """Every quote in the docs (stale or not)."""
    figures = load_results(results, labs)
    return [
        quote
        for path in quoting_files(root)
        for quote in quotes(path.read_text(encoding="utf-8"), str(path.relative_to(root)), figures)
    ]


def write(root: Path = ROOT, results: Path = RESULTS, labs: dict[str, Path] | None = None) -> list[Quote]:
    """Rewrites every stale quote that names a generated figure; returns those rewritten."""
    figures = load_results(results, labs)
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
        for path in derived.write():
            print(f"derived: {path.relative_to(ROOT)}")
        for quote in write():
            print(f"rewritten: {quote}")
    found = check()
    stale = [q for q in found if q.stale]
    for line in [*derived.stale(), *map(str, stale)]:
        print(line)
    print(f"{len(found)} quoted figures, {len(stale)} stale", file=sys.stderr)
    return 1 if stale or derived.stale() else 0


if __name__ == "__main__":
    sys.exit(main())

"""MkDocs hooks: pages kept outside ``docs/`` join the site under one text, never a copy.

- ``index.md`` is README.md, as on GitHub;
- ``benchmarks.md`` is benchmarks/README.md, next to the code it measures.

Their links are rewritten for the site's layout (``docs/x.md`` from the README, ``../docs/x.md``
from the benchmarks), and the docs' links to ``../benchmarks/README.md`` point at its page.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parent
#: Site page -> the file outside docs/ it shows, and the link prefix that file uses for docs/.
OUTSIDE = {"index.md": (ROOT / "README.md", "docs/"), "benchmarks.md": (ROOT / "benchmarks" / "README.md", "../docs/")}


def github_slug(value: str, separator: str) -> str:
    """A heading's anchor as GitHub makes it (lower case, punctuation dropped, each space a hyphen),
    so the links written for GitHub (README, docs) land on the same heading on the site."""
    text = re.sub(r"<[^>]+>", "", value).strip().lower()  # the heading's text, as rendered (code spans kept)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", separator)


def on_config(config: Any) -> Any:
    """Anchors slugged as GitHub slugs them (see :func:`github_slug`)."""
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files: Files, config: Any) -> Files:
    """Adds ``benchmarks.md`` (``index.md`` has a placeholder in docs/ so that the nav can name it)."""
    if files.get_file_from_path("benchmarks.md") is None:
        files.append(File.generated(config, "benchmarks.md", content=""))
    return files


def on_page_read_source(page: Any, config: Any) -> str | None:
    """The text of a page kept outside ``docs/``, its links made relative to the site's root."""
    outside = OUTSIDE.get(page.file.src_uri)
    if outside is None:
        return None
    path, prefix = outside
    text = path.read_text(encoding="utf-8")
    return text.replace(f"]({prefix}", "](")


#: A link from docs/ to a file of the repository that is no page (code, a config): shown as its path.
REPOSITORY_FILE = re.compile(r"\[([^\]]+)\]\((?:\.\./)+((?:examples|lightning_order|tests|configs|benchmarks)/[^)#\s]+?)(?:#[^)]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Links to benchmarks/README.md and README.md point at their pages; links to code, at its path."""
    markdown = re.sub(r"\]\((\.\./)?benchmarks/README\.md", "](benchmarks.md", markdown)
    markdown = re.sub(r"\]\(\.\./README\.md", "](index.md", markdown)
    return REPOSITORY_FILE.sub(
        lambda m: m[0] if m[2].endswith(".md") else f"{m[1]} (`{m[2]}` in the repository)", markdown
    )

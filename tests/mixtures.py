"""What the mixture tests share: two text sources of disjoint words, and which source a block came from.

``web`` documents are made of :data:`WEB` words, ``code`` documents of :data:`CODE` words, so a
block decoded by the datamodule's tokenizer names its source (a block holding words of both would
span two sources). With ``twin``, the last paragraph of ``code`` is a near-copy of the first of
``web`` (a word changed).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order import LMSource, OrderedLMDataModule

WEB = ("the", "cat", "sat", "on", "mat", "dog", "ran", "far", "away", "home", "with", "red", "hat")
CODE = ("def", "return", "if", "else", "for", "in", "range", "print", "yield", "lambda", "import", "class")
SMALL = {"vocab_size": 300, "block_size": 16, "val_fraction": 0.2, "sample_by": "paragraph", "batch_size": 4}


def _documents(seed: int, count: int, words: tuple[str, ...]) -> list[str]:
    rng = random.Random(seed)
    return [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(20, 60))) for _ in range(2))
        for _ in range(count)
    ]


def write_sources(folder: Path, web: int = 200, code: int = 120, twin: bool = False) -> tuple[str, str]:
    """Two text files (paragraphs are documents): ``web`` and ``code`` documents (and the near-copy: ``twin``)."""
    web_docs, code_docs = _documents(1, web, WEB), _documents(2, code, CODE)
    if twin:
        words = web_docs[0].split(" ")
        words[3] = "dog" if words[3] != "dog" else "cat"  # a near-duplicate across the sources
        code_docs.append(" ".join(words))
    paths = []
    for name, docs in (("web", web_docs), ("code", code_docs)):
        path = folder / name / "docs.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(docs) + "\n")
        paths.append(str(path))
    return paths[0], paths[1]


def mixture_dm(
    folder: Path, cache: Path | str, weights: tuple[float, float] = (0.7, 0.3), **kwargs: Any
) -> Any:
    """An ``OrderedLMDataModule`` mixing ``folder``'s two sources (:func:`write_sources`) at ``weights``."""
    web, code = str(folder / "web" / "docs.txt"), str(folder / "code" / "docs.txt")
    sources = [
        LMSource(path=web, weight=weights[0], name="web"),
        LMSource(path=code, weight=weights[1], name="code"),
    ]
    options = {**SMALL, "num_proc": 1, **kwargs}
    return OrderedLMDataModule(sources=sources, cache_dir=str(cache), **options)


def block_source(dm: Any, block: np.ndarray) -> str:
    """``"web"``, ``"code"`` or ``"both"`` (words of the two sources in one block), from its decoded words."""
    # the first and last words may be pieces of longer ones ("ran" of "range"): only whole words count
    words = set(dm.tokenizer.decode([int(t) for t in block]).split()[1:-1])
    web, code = bool(words & set(WEB)), bool(words & set(CODE))
    return "both" if web and code else ("web" if web else "code")


def source_shares(dm: Any, blocks: np.ndarray) -> dict[str, float]:
    """Each source's share of ``blocks`` (every block holds the same number of tokens: token shares)."""
    owners = [block_source(dm, b) for b in blocks]
    return {name: owners.count(name) / len(owners) for name in ("web", "code", "both")}

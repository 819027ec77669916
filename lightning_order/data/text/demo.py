"""The built-in demo corpus: deterministic, labelled, dirty text with numeric columns.

The corpus exists so that every order error can be reproduced for real without a download. Each
row has a ``text`` (words drawn from a shared pool and from its class's topic words), an integer
``label`` (4 classes), three numeric columns on very different scales that also carry part of
the label, and a ``source`` id. The text is dirty the way scraped text is: HTML tags and
entities, unicode variants (full-width letters, ligatures, non-breaking spaces), stray ``##``
word-piece markers, repeated punctuation, and near-duplicate rows that only differ in dirt (they
become identical after cleaning). With ``sources > 1`` the rows come in contiguous blocks whose
numeric columns have different scales, so contiguous shards differ in distribution.

Generation is a pure function of ``(size, seed, sources)``: the same arguments give the same rows
on every machine (Python's ``random.Random`` with an explicit seed, no global state).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # datasets is imported when a corpus is built (a cache hit needs none)
    import datasets

__all__ = ["DEMO_NUMERIC_COLUMNS", "DEMO_NUM_CLASSES", "demo_rows", "make_demo_corpus"]

#: The numeric columns of the demo corpus (note the scales: ~1e-3, ~1, ~1e4).
DEMO_NUMERIC_COLUMNS: tuple[str, ...] = ("ratio", "score", "amount")
DEMO_NUM_CLASSES = 4

_COMMON = (
    "the a of and to in is was for on that with as by it this from at be are have has not but "
    "or an they which one you were all we can her his there been if more when will would who so "
    "no about people time year new day good first last long great little own other old right big "
    "high different small large next early young important few public bad same able report "
    "market city team season service review order data product price week water house"
).split()
_TOPICS = (
    "goal match player league coach striker stadium referee tournament trophy injury transfer".split(),
    "election minister parliament vote policy senator campaign budget treaty governor reform law".split(),
    "software processor startup network algorithm cloud device chip robot internet server code".split(),
    "recipe flavour kitchen oven garlic bakery dessert chef spice noodle harvest vineyard".split(),
)
_TAGS = ("<b>", "</b>", "<p>", "</p>", "<br/>", "<div class='x'>", "</div>", "<i>", "</i>")
_ENTITIES = ("&amp;", "&nbsp;", "&quot;", "&#39;", "&lt;br&gt;")
_PUNCT = ("!!!", "??", "....", ",,", "!?!?")
_FULLWIDTH = {c: chr(ord(c) - ord("a") + ord("ａ")) for c in "abcdefghijklmnopqrstuvwxyz"}
_LIGATURES = {"fi": "ﬁ", "fl": "ﬂ"}


def _dirty(words: list[str], rng: random.Random) -> str:
    out: list[str] = []
    for word in words:
        roll = rng.random()
        if roll < 0.04:
            out.append(rng.choice(_TAGS) + word)
        elif roll < 0.07:
            out.append(word + " " + rng.choice(_ENTITIES))
        elif roll < 0.09:
            out.append("##" + word)  # a stray word-piece marker left by a bad export
        elif roll < 0.11:
            out.append("".join(_FULLWIDTH.get(c, c) for c in word))
        elif roll < 0.13:
            for plain, lig in _LIGATURES.items():
                word = word.replace(plain, lig)
            out.append(word)
        elif roll < 0.16:
            out.append(word + rng.choice(_PUNCT))
        elif roll < 0.19:
            out.append(word.capitalize())
        else:
            out.append(word)
    sep = "\u00a0 " if rng.random() < 0.1 else "  " if rng.random() < 0.1 else " "
    return sep.join(out)


def demo_rows(size: int, seed: int = 0, sources: int = 1) -> Iterator[dict[str, Any]]:
    """Yields the demo corpus row by row.

    Args:
        size: the number of rows.
        seed: the generator's seed.
        sources: the number of contiguous blocks ("sources") with different numeric scales.

    Yields:
        Dicts with ``text``, ``label``, ``ratio``, ``score``, ``amount`` and ``source``.
    """
    if size < 0:
        raise ValueError(f"demo size must be >= 0, got {size}")
    if sources < 1:
        raise ValueError(f"demo sources must be >= 1, got {sources}")
    rng = random.Random(f"lightning_order.demo:{seed}")
    recent: list[tuple[int, list[str]]] = []
    block = max(1, -(-size // sources))
    for index in range(size):
        source = min(index // block, sources - 1)
        if recent and rng.random() < 0.05:
            # A near-duplicate: the same words as an earlier row, with different dirt.
            label, words = recent[rng.randrange(len(recent))]
        else:
            label = rng.randrange(DEMO_NUM_CLASSES)
            length = rng.randint(12, 48)
            topic = _TOPICS[label]
            words = [rng.choice(topic) if rng.random() < 0.25 else rng.choice(_COMMON) for _ in range(length)]
            recent.append((label, words))
            if len(recent) > 64:
                recent.pop(0)
        scale = 10.0 ** (source % 3)  # each source has its own units
        yield {
            "text": _dirty(words, rng),
            "label": label,
            "ratio": (rng.gauss(0.0, 1.0) + 0.8 * label) * 1e-3 * scale,
            "score": rng.gauss(50.0, 15.0) * scale,
            "amount": (rng.lognormvariate(0.0, 0.5) + 0.5 * (label % 2)) * 1e4 * scale + 1e5 * source,
            "source": source,
        }


def _features() -> datasets.Features:
    import datasets

    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.Value("int64"),
            "ratio": datasets.Value("float64"),
            "score": datasets.Value("float64"),
            "amount": datasets.Value("float64"),
            "source": datasets.Value("int64"),
        }
    )


def make_demo_corpus(
    size: int = 20000, seed: int = 0, sources: int = 1, cache_dir: str | Path | None = None
) -> datasets.Dataset:
    """Builds the demo corpus as an Arrow-backed :class:`datasets.Dataset` (written to disk, not RAM).

    Args:
        size: the number of rows (about 200 bytes of text each).
        seed: the generator's seed.
        sources: contiguous blocks with different numeric scales (1: one source).
        cache_dir: where datasets writes the Arrow file (default: datasets' cache).

    Returns:
        The corpus, with the columns of :func:`demo_rows`.
    """
    import datasets

    return datasets.Dataset.from_generator(
        demo_rows,
        features=_features(),
        gen_kwargs={"size": int(size), "seed": int(seed), "sources": int(sources)},
        cache_dir=None if cache_dir is None else str(cache_dir),
    )

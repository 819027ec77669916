"""Raw pages of a scraped corpus and the clean step that strips them, for the tokenizer-fit cases.

:func:`to_html` wraps a document as a scraped page holds it (paragraphs in tags, entities escaped,
a link, a wrapper); :func:`clean` takes it back to the text. :func:`prepare_raw_fit` is
tests/nanogpt.py's preparation with the planted bug of #37 item 5: the BPE trained on the raw
pages, the cleaned text encoded. Used by tests/unit/callbacks/validator/test_lm.py,
tests/integration/test_tokenizer_fit_zero_glue.py and benchmarks/tokenizer_fit_lab.py.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
from nanogpt import DOCUMENTS, VOCAB, corpus, encode, split, train_tokenizer, write_bin


def to_html(doc: str, index: int) -> str:
    """``doc`` as a scraped page holds it: paragraphs in tags, entities escaped, a link and a wrapper."""
    paragraphs = "".join(f'<p class="text">{html.escape(p)}</p>\n' for p in doc.split("\n\n") if p.strip())
    link = f'<a href="https://docs.example.org/page/{index}.html">source</a>'
    return f'<div class="content" id="doc-{index}">\n{paragraphs}<span class="footer">{link}</span></div>'


def clean(raw: str) -> str:
    """Markup out, entities decoded, whitespace runs inside lines made single."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", raw))
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line and line != "source")


def prepare_fit(folder: Path, fit_on: str, *, documents: int = DOCUMENTS, seed: int = 0) -> None:
    """``train.bin``, ``val.bin``, ``tokenizer.json`` from raw pages, cleaned before encoding.

    Args:
        folder: where the files go.
        fit_on: the text the BPE learns from: ``"clean"`` (correct: the cleaned train documents),
            ``"raw"`` (the planted bug: the raw train pages) or ``"elsewhere"`` (correct: a
            tokenizer trained on another corpus's raw pages, four times larger).
        documents: how many documents; ``seed`` picks another corpus.
    """
    folder.mkdir(parents=True, exist_ok=True)
    raw = [to_html(d, i) for i, d in enumerate(corpus(documents, seed))]
    train, val = split(tuple(clean(r) for r in raw))
    texts = {
        "clean": train,
        "raw": [to_html(d, i) for i, d in enumerate(train)],
        "elsewhere": [to_html(d, i) for i, d in enumerate(corpus(documents, seed + 1000))],
    }[fit_on]
    tokenizer = train_tokenizer(texts, VOCAB * (4 if fit_on == "elsewhere" else 1))
    tokenizer.save(str(folder / "tokenizer.json"))
    dtype = np.uint16
    write_bin(folder / "train.bin", encode(tokenizer, train), dtype)
    write_bin(folder / "val.bin", encode(tokenizer, val), dtype)


#: The three tokenizers :func:`prepare_fit` can train: two correct, the planted bug (``"raw"``).
FITS = ("clean", "raw", "elsewhere")


def prepare_fits(root: Path) -> dict[str, Path]:
    """One :func:`prepare_fit` folder per way of fitting the tokenizer, under ``root``, by :data:`FITS` name."""
    for fit_on in FITS:
        prepare_fit(root / fit_on, fit_on)
    return {fit_on: root / fit_on for fit_on in FITS}

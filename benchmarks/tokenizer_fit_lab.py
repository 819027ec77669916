"""Issue #37 item 5: can a tokenizer fitted on the wrong text be seen with no record (zero glue)?

Two planted bugs, each against the correct pipeline (clean -> split -> BPE on the clean train
documents -> encode), on hand-written nanoGPT-style preparations (tests/nanogpt.py's byte-level
BPE with ``<|endoftext|>``):

- ``train+val``: the BPE trained on the train and validation documents (``fit-before-split``);
- ``raw-html``: the BPE trained on the raw (HTML) train documents, the text cleaned afterwards
  and the clean text encoded (``vocab-before-clean``).

For each run it measures what the validator can read without a record: the tokenizer's
vocabulary, and the token ids of sampled train and validation windows (``--rows`` windows of
``--block + 1`` tokens, as ``sample_batch`` draws them), or of the whole splits (``--whole``):

- ``val_only``: vocabulary entries used by the validation sample and never by the train sample,
  and ``train_only`` the other way (the same number of tokens read on each side);
- ``markup_unused``: merged markup-like entries (:data:`MARKUP`, two characters or more) that
  the train sample never uses, ``markup`` all of them, and ``foreign_chars`` those of the unused
  ones holding a character that no token of the train sample holds;
- ``used_share``: the share of the vocabulary that the train sample uses (a tokenizer fitted on
  this text uses most of it; one trained elsewhere, little).

A second correct pipeline, ``supplied``, encodes with a tokenizer 4 times larger trained on
another corpus's raw pages (a tokenizer trained elsewhere, markup included: not a bug).

Corpora: the standard library's documentation (``stdlib_corpus``, as the LM demo reads it) and
its first 360 documents (a small corpus), each split with 5 hash seeds, and tests/nanogpt.py's
generated prose (400 documents, 5 seeds). Every document is wrapped in the markup of a scraped
page and cleaned back (tests/markup.py's ``to_html`` and ``clean``).

Run: ``PYTHONPATH=$PWD python benchmarks/tokenizer_fit_lab.py`` (about a minute on 1 core);
``--json PATH`` writes every run's figures; ``--results`` writes the table's to
``benchmarks/results/tokenizer_fit.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]  # tests/markup.py, as a script

from figures import command_line, write_results  # noqa: E402
from markup import clean, to_html  # noqa: E402

from lightning_order.checks.tokenizer_fit import MARKUP_PIECES as MARKUP  # noqa: E402
from lightning_order.checks.tokenizer_fit import check_tokenizer_fit, tokenizer_fit_evidence  # noqa: E402

EOS = "<|endoftext|>"


def split(docs: list[str], seed: int, val_share: float = 0.2) -> tuple[list[int], list[int]]:
    """Indices of the train and validation documents, by a hash of the clean text (``seed``)."""
    to_val = [xxhash.xxh64_intdigest(d.encode(), seed=seed) % 1000 < val_share * 1000 for d in docs]
    return [i for i, v in enumerate(to_val) if not v], [i for i, v in enumerate(to_val) if v]


def train_bpe(texts: list[str], vocab_size: int) -> Any:
    """tests/nanogpt.py's byte-level BPE (``<|endoftext|>`` special)."""
    from nanogpt import train_tokenizer

    return train_tokenizer(texts, vocab_size)


def encode(tokenizer: Any, texts: list[str]) -> np.ndarray:
    eos = tokenizer.token_to_id(EOS)
    return np.concatenate([np.asarray([*e.ids, eos], dtype=np.int64) for e in tokenizer.encode_batch(texts)])


def sample_windows(ids: np.ndarray, rows: int, width: int) -> np.ndarray:
    """The tokens of ``rows`` windows of ``width`` drawn as the validator draws rows (seeded)."""
    size = len(ids) - width + 1
    picked = np.sort(np.random.default_rng(0).choice(size, size=min(rows, size), replace=False))
    return np.concatenate([ids[i : i + width] for i in picked])


def markup_ids(tokenizer: Any) -> set[int]:
    """Merged entries (two characters or more) whose text holds a markup-like piece (specials left out)."""
    found = set()
    for token, i in tokenizer.get_vocab().items():
        text = tokenizer.decode([i])
        if token != EOS and len(text.strip()) >= 2 and any(piece in text for piece in MARKUP):
            found.add(i)
    return found


def signals(tokenizer: Any, train_ids: np.ndarray, val_ids: np.ndarray) -> dict[str, Any]:
    """The figures of one run, from the tokenizer and the token ids read on each side."""
    n = min(len(train_ids), len(val_ids))  # the same number of tokens on each side
    train_used, val_used = set(np.unique(train_ids[:n]).tolist()), set(np.unique(val_ids[:n]).tolist())
    train_all = set(np.unique(train_ids).tolist())
    markup = markup_ids(tokenizer)
    unused = markup - train_all
    seen_chars = set("".join(tokenizer.decode([i]) for i in train_all))
    foreign = {i for i in unused if not set(tokenizer.decode([i])) <= seen_chars}
    vocab = {i: tokenizer.decode([i]) for i in tokenizer.get_vocab().values()}
    special = {int(i) for i in tokenizer.get_added_tokens_decoder()}
    found = check_tokenizer_fit(tokenizer_fit_evidence(vocab, train_all, special, len(train_ids)))
    return {
        "vocab": tokenizer.get_vocab_size(),
        "used_share": round(len(train_all) / tokenizer.get_vocab_size(), 3),
        "val_only": len(val_used - train_used),
        "train_only": len(train_used - val_used),
        "markup": len(markup),
        "markup_unused": len(unused),
        "foreign_chars": len(foreign),
        "used_merge_share": round(
            tokenizer_fit_evidence(vocab, train_all, special, len(train_ids)).used_merge_share, 3
        ),
        "rule": ",".join(v.rule for v in found) or "-",
    }


def run(
    docs: list[str], seed: int, bug: str, vocab_size: int, rows: int, width: int, whole: bool
) -> dict[str, int]:
    """One preparation (``bug``: ``none``, ``train+val`` or ``raw-html``) and its figures."""
    raw = [to_html(d, i) for i, d in enumerate(docs)]
    cleaned = [clean(r) for r in raw]
    train, val = split(cleaned, seed)
    if bug == "supplied":  # correct: a tokenizer trained elsewhere, on another corpus's raw pages
        tokenizer = train_bpe(supplied_text(docs), 4 * vocab_size)
    else:
        fit_on = {
            "none": [cleaned[i] for i in train],
            "train+val": [cleaned[i] for i in train + val],
            "raw-html": [raw[i] for i in train],
        }[bug]
        tokenizer = train_bpe(fit_on, vocab_size)
    train_ids = encode(tokenizer, [cleaned[i] for i in train])
    val_ids = encode(tokenizer, [cleaned[i] for i in val])
    if not whole:
        train_ids, val_ids = sample_windows(train_ids, rows, width), sample_windows(val_ids, rows, width)
    return signals(tokenizer, train_ids, val_ids)


def supplied_text(docs: list[str]) -> list[str]:
    """Raw pages of another corpus than ``docs`` (the prose for documentation, and the other way)."""
    from nanogpt import corpus

    from lightning_order.data.lm.corpus import stdlib_corpus

    other = list(corpus(400, 99)) if "(" in "".join(docs[:50]) else stdlib_corpus()
    return [to_html(d, i) for i, d in enumerate(other)]


def corpora() -> dict[str, tuple[Callable[[], list[str]], int]]:
    """Name -> (documents, vocabulary size)."""
    from nanogpt import corpus

    from lightning_order.data.lm.corpus import stdlib_corpus

    return {
        "stdlib": (lambda: [d.strip() for d in stdlib_corpus()], 1024),
        "stdlib-360": (lambda: [d.strip() for d in stdlib_corpus(360)], 512),
        **{f"prose-{s}": (lambda s=s: list(corpus(400, s)), 512) for s in range(5)},
    }


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _family(corpus: str) -> str:
    return "prose" if corpus.startswith("prose") else corpus


def table(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per corpus family and pipeline: runs, runs the rule fired on, and the figures' ranges (text)."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for family in ("stdlib", "stdlib-360", "prose"):
        for bug in ("none", "supplied", "train+val", "raw-html"):
            runs = [r for r in results if _family(r["corpus"]) == family and r["bug"] == bug]
            if runs:
                rows.setdefault(family, {})[bug.replace("+", "_")] = {
                    "runs": len(runs),
                    "fired": sum(r["rule"] != "-" for r in runs),
                    "markup_unused": _span([r["markup_unused"] for r in runs]),
                    "merges_used": _span([r["used_merge_share"] for r in runs]),
                    "val_only": _span([r["val_only"] for r in runs]),
                    "train_only": _span([r["train_only"] for r in runs]),
                }
    return rows


def print_table(results: list[dict[str, Any]]) -> None:
    """One Markdown row per corpus family and pipeline: runs the rule fired on, and the figures' ranges."""
    print(
        "| corpus | pipeline | vocab-before-clean fired | unused markup merges | merges used | val-only / train-only entries |"
    )
    print("|---|---|---|---|---|---|")
    for family, bugs in table(results).items():
        for bug, r in bugs.items():
            print(
                f"| {family} | {bug} | {r['fired']}/{r['runs']} | {r['markup_unused']} | {r['merges_used']} "
                f"| {r['val_only']} / {r['train_only']} |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512, help="windows sampled per split (the validator's)")
    parser.add_argument("--block", type=int, default=128, help="window length - 1")
    parser.add_argument("--whole", action="store_true", help="read the whole splits, not a sample")
    parser.add_argument("--json", help="write every run's figures to this file")
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/tokenizer_fit.json, the figures the docs quote"
    )
    args = parser.parse_args(argv)
    results = []
    for name, (documents, vocab_size) in corpora().items():
        docs = documents()
        seeds = range(5) if name.startswith("stdlib") else [0]
        for seed in seeds:
            for bug in ("none", "supplied", "train+val", "raw-html"):
                figures = run(docs, seed, bug, vocab_size, args.rows, args.block + 1, args.whole)
                results.append({"corpus": name, "docs": len(docs), "seed": seed, "bug": bug, **figures})
                print(json.dumps(results[-1]), flush=True)
    print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    if args.results:
        print(f"wrote {write_results('tokenizer_fit', table(results), command_line(None if argv is None else [__file__, *argv]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

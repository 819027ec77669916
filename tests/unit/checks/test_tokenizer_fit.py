"""``vocab-before-clean`` from the tokenizer and sampled tokens alone (lightning_order/checks/tokenizer_fit.py).

The thresholds are the lab's (benchmarks/tokenizer_fit_lab.py, docs/lm.md): planted, 11 to 23
markup merges unused and 0.71 to 0.94 of the merges used; correct, at most 1 unused; a tokenizer
trained elsewhere, 0.04 to 0.14 of its merges used. The gathering from a datamodule:
tests/unit/callbacks/validator/test_lm.py.
"""

from __future__ import annotations

import pytest

from lightning_order.checks.tokenizer_fit import (
    MIN_UNUSED_MARKUP,
    check_tokenizer_fit,
    tokenizer_fit_evidence,
)

PROSE = {i: text for i, text in enumerate(["a", "b", "c", "ab", "abc", " ba", " cab", "ca", "bc", "cc"])}
MARKUP = ["<p", 'class="', "</p>", "href", "://", "<div", "&amp;", 'id="', "span", "</div>", "<a"]


def _vocab(markup: list[str], prose_merges: int = 100) -> dict[int, str]:
    vocab = {i: chr(97 + i % 26) for i in range(26)}  # the alphabet: no merge
    vocab.update({100 + i: f"w{i}" for i in range(prose_merges)})
    vocab.update({1000 + i: text for i, text in enumerate(markup)})
    vocab[2000] = "<|endoftext|>"  # special: never counted as markup
    return vocab


def test_markup_merges_the_cleaned_data_never_uses_are_vocab_before_clean() -> None:
    vocab = _vocab(MARKUP)
    used = [*range(26), *range(100, 190)]  # 90 of 100 prose merges; no markup
    evidence = tokenizer_fit_evidence(vocab, used, special_ids=[2000], sampled_tokens=65_000)
    (violation,) = check_tokenizer_fit(evidence)
    assert violation.rule == "vocab-before-clean"
    assert violation.steps == ("build_vocab", "clean")
    assert "11 markup-like merged entries" in violation.message and "'<p'" in violation.message
    assert "65,000 sampled train tokens" in violation.message
    assert "train the tokenizer on the cleaned train documents" in violation.message
    assert violation.details["markup"] == 11


@pytest.mark.parametrize(
    ("markup", "used_markup", "used_prose", "why"),
    [
        (MARKUP, MARKUP, 90, "the data uses its markup merges (code, docs with links)"),
        (MARKUP[: MIN_UNUSED_MARKUP - 1], [], 90, "too few unused markup merges: sampling noise"),
        (MARKUP, MARKUP[:6], 90, "most markup merges are used: the data holds markup"),
        (MARKUP, [], 10, "a tokenizer trained elsewhere: the data uses few of its merges"),
        ([], [], 90, "no markup at all"),
    ],
)
def test_no_alarm(markup: list[str], used_markup: list[str], used_prose: int, why: str) -> None:
    vocab = _vocab(markup)
    ids = {text: i for i, text in vocab.items()}
    used = [*range(26), *range(100, 100 + used_prose), *(ids[t] for t in used_markup)]
    assert check_tokenizer_fit(tokenizer_fit_evidence(vocab, used, special_ids=[2000])) == [], why


def test_special_tokens_and_single_characters_are_no_merge() -> None:
    evidence = tokenizer_fit_evidence(_vocab(["<p"]), used_ids=[], special_ids=[2000])
    assert evidence.merges == 101 and evidence.markup == ("<p",)  # '<|endoftext|>' left out

"""``lightning_order.data.lm.clusters`` and ``shingles``: exact and MinHash/LSH near-duplicate removal, and the straddling check.

Every constructed case is built from real standard-library docstrings; every similarity the tests
rely on is computed here independently of the module, exactly.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from dedup_reference import DedupResult, deduplicate, straddling_pairs
from helpers import exact_jaccard, word_grams

from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.errors import DataError


def _key(text: str) -> tuple[int, int]:
    """The rule's order, computed independently: the 128-bit hash of the normalised text, then of the text."""
    normalised = " ".join(text.lower().split()).encode()
    return xxhash.xxh3_128_intdigest(normalised), xxhash.xxh3_64_intdigest(text.encode())


def _keeper(texts: list[str], group: list[int]) -> int:
    """Which of a cluster of duplicates the rule keeps: the smallest key (then the first of identical texts)."""
    return min(group, key=lambda i: (*_key(texts[i]), i))


@pytest.fixture(scope="module")
def docs() -> list[str]:
    """Distinct long stdlib docstrings (no pair near the threshold), in corpus order."""
    chosen: list[str] = []
    seen: list[frozenset] = []
    for text in stdlib_corpus():
        grams = word_grams(text)
        if len(text.split()) < 60 or any(len(grams & s) / len(grams | s) > 0.3 for s in seen[-50:]):
            continue
        chosen.append(text)
        seen.append(grams)
        if len(chosen) == 120:
            break
    return chosen


def _edit(text: str, fraction: float, seed: int) -> str:
    """Replaces a ``fraction`` of the words with another word, spread evenly (a near-duplicate)."""
    words = text.split()
    rng = random.Random(seed)
    step = max(1, round(1 / fraction))
    for i in range(rng.randrange(step), len(words), step):
        words[i] = "zzz" + words[i]
    return " ".join(words)


def test_distinct_documents_are_all_kept(docs):
    result = deduplicate(docs)
    assert isinstance(result, DedupResult)
    assert result.keep.dtype == np.int64
    assert result.keep.tolist() == list(range(len(docs)))
    assert (result.exact_removed, result.near_removed) == (0, 0)


def test_exact_duplicates_after_normalisation_keep_the_smallest_key(docs):
    base = docs[:30]
    copies = [base[3].upper(), "  " + base[7].replace(" ", "\n  "), base[3], base[20] + "\t"]
    texts = base + copies
    result = deduplicate(texts)
    assert result.exact_removed == 4
    assert result.near_removed == 0
    groups = {3: [3, 30, 32], 7: [7, 31], 20: [20, 33]}
    expected = sorted(
        [i for i in range(30) if i not in groups] + [_keeper(texts, g) for g in groups.values()]
    )
    assert result.keep.tolist() == expected
    assert deduplicate(list(reversed(texts))).exact_removed == 4


def test_near_duplicates_are_removed_and_counted_exactly(docs):
    base = docs[:40]
    variants = {}
    for k, i in enumerate((2, 5, 11, 17, 29)):
        variants[i] = _edit(base[i], 0.01, seed=k)  # ~1 word in 100 changed: Jaccard ≈ 0.95
    far = _edit(base[33], 0.25, seed=9)  # a quarter of the words changed: Jaccard far below 0.8
    texts = base + list(variants.values()) + [far]
    for i, text in variants.items():
        assert exact_jaccard(base[i], text) >= 0.8
    assert exact_jaccard(base[33], far) < 0.8
    result = deduplicate(texts)
    assert result.exact_removed == 0
    assert result.near_removed == 5
    pairs = [[i, 40 + k] for k, i in enumerate(variants)]
    dropped = {next(m for m in pair if m != _keeper(texts, pair)) for pair in pairs}
    assert result.keep.tolist() == [i for i in range(len(texts)) if i not in dropped]


def test_the_kept_near_duplicate_does_not_depend_on_the_order(docs):
    # The smaller key of two near-duplicates is kept, whichever way round they are listed.
    a, b = docs[4], _edit(docs[4], 0.01, seed=1)
    assert exact_jaccard(a, b) >= 0.8
    kept = a if _key(a) < _key(b) else b
    assert [[b, a][i] for i in deduplicate([b, a]).keep] == [kept]
    assert [[a, b][i] for i in deduplicate([a, b]).keep] == [kept]


def test_threshold_decides(docs):
    text = docs[10]
    variant = _edit(text, 0.05, seed=3)
    similarity = exact_jaccard(text, variant)
    assert 0.3 < similarity < 0.9
    assert deduplicate([text, variant], threshold=similarity - 0.01).near_removed == 1
    assert deduplicate([text, variant], threshold=min(1.0, similarity + 0.01)).near_removed == 0


def test_no_kept_pair_reaches_the_threshold_on_a_real_sample(docs):
    # The whole corpus plus planted near-duplicates; every kept pair of a random sample checked exactly.
    corpus = stdlib_corpus()
    rng = random.Random(0)
    planted = [
        _edit(corpus[i], rng.choice((0.01, 0.02, 0.05)), seed=i) for i in rng.sample(range(len(corpus)), 60)
    ]
    texts = corpus + planted
    result = deduplicate(texts)
    assert result.exact_removed > 50  # the corpus's own inherited docstrings
    assert result.near_removed > 20
    kept = [texts[i] for i in result.keep]
    sample = [kept[i] for i in sorted(rng.sample(range(len(kept)), 500))]
    grams = [word_grams(t) for t in sample]
    for i in range(len(sample)):
        for j in range(i + 1, len(sample)):
            if grams[i] and grams[j]:
                similarity = len(grams[i] & grams[j]) / len(grams[i] | grams[j])
                assert similarity < 0.8, (sample[i][:80], sample[j][:80], similarity)
    # And nothing was removed without a twin at the threshold (exact check): its cluster's link.
    removed = sorted(set(range(len(texts))) - set(result.keep.tolist()))
    for r in rng.sample(removed, 20):
        norm = " ".join(texts[r].lower().split())
        assert any(
            " ".join(texts[k].lower().split()) == norm or exact_jaccard(texts[k], texts[r]) >= 0.8
            for k in range(len(texts))
            if k != r
        )


def test_deterministic(docs):
    variants = [_edit(d, 0.02, seed=i) for i, d in enumerate(docs[:20])]
    expected = sum(exact_jaccard(d, v) >= 0.8 for d, v in zip(docs, variants))
    assert 5 <= expected < 20  # some variants are near-duplicates, some are not
    first, second = deduplicate(docs + variants), deduplicate(docs + variants)
    assert first.keep.tolist() == second.keep.tolist()
    assert (
        (first.exact_removed, first.near_removed)
        == (second.exact_removed, second.near_removed)
        == (0, expected)
    )


def test_empty_and_short_documents_are_deduplicated_exactly_only():
    texts = ["", "", "Return self.", "return   SELF.", "Return the value", "   "]
    result = deduplicate(texts)
    assert result.keep.tolist() == sorted([_keeper(texts, [0, 1, 5]), _keeper(texts, [2, 3]), 4])
    assert result.exact_removed == 3  # "" twice more ("   " normalises to ""), and the case variant
    assert result.near_removed == 0
    assert result.short_documents == 6
    assert deduplicate([]).keep.tolist() == []


@pytest.mark.parametrize("threshold", [0, 0.0, -0.1, 1.5, float("nan"), "0.8", None])
def test_bad_threshold_is_a_clear_data_error(threshold):
    with pytest.raises(DataError, match="threshold") as info:
        deduplicate(["a b c d e f"], threshold=threshold)
    assert info.value.step == "dedup"


@pytest.mark.parametrize("kwargs", [{"ngram": 0}, {"ngram": 2.5}, {"num_perm": 1}])
def test_bad_parameters_are_data_errors(kwargs):
    with pytest.raises(DataError, match=next(iter(kwargs))):
        deduplicate(["a b c d e f"], **kwargs)


def test_lone_surrogates_are_deduplicated_like_any_text(docs):
    # Text decoded with errors="surrogateescape" holds lone surrogates, which Arrow cannot store.
    text = docs[0] + " \udcff"
    near = _edit(text, 0.01, seed=0)
    assert exact_jaccard(text, near) >= 0.8
    result = deduplicate([text, near, text, docs[1]])
    assert (result.exact_removed, result.near_removed) == (1, 1)
    assert result.keep.tolist() == [0, 3]
    assert straddling_pairs([text], [near])[0][:2] == (0, 0)


def test_a_document_that_is_not_text_is_a_data_error():
    with pytest.raises(DataError, match="index 1"):
        deduplicate(["fine text", None])


def test_straddling_pairs_finds_exactly_the_planted_pairs(docs):
    train = docs[:60]
    val = docs[60:90]
    planted = {
        (5, 3): _edit(train[5], 0.01, seed=1),
        (44, 12): _edit(train[44], 0.02, seed=2),
        (7, 20): train[7],
    }
    val = list(val)
    for (_, j), text in planted.items():
        val[j] = text
    val.append("Return self.")  # short documents pair only when equal
    train = [*train, "return  self."]
    pairs = straddling_pairs(train, val)
    assert [(i, j) for i, j, _ in pairs] == [*sorted((i, j) for i, j in planted), (60, 30)]
    for i, j, similarity in pairs[:-1]:
        assert similarity == pytest.approx(exact_jaccard(train[i], val[j]))
    assert straddling_pairs(docs[:60], docs[60:90]) == []
    assert straddling_pairs([], []) == []

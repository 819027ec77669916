"""The ``dedup`` step's rule on a list of texts, in memory: the reference the streamed step is tested against.

:func:`deduplicate` applies the rule of :mod:`lightning_order.data.lm.clusters` (exact duplicates
by the key of the normalised text, near-duplicates by MinHash candidates confirmed by their exact
word n-gram Jaccard, each cluster keeping the document with the smallest key) to texts held in
one list; :func:`straddling_pairs` finds the near-duplicate pairs across two lists (the train and
validation splits). Neither is used by the library, which never holds the corpus in one place:
they answer, independently of partitions and workers, what the step must have done.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from lightning_order.data.lm.clusters import band_keys, few_words, pairs_of_groups
from lightning_order.data.lm.shingles import normalised_digest, shingle_set, words
from lightning_order.errors import DataError

__all__ = ["DedupResult", "check_params", "clusters_removed", "deduplicate", "straddling_pairs"]

_STEP = "dedup"


def check_params(threshold: float, ngram: int, num_perm: int) -> None:
    """Refuses a threshold outside (0, 1], an ngram below 1 or fewer than 2 permutations."""
    if not isinstance(threshold, (int, float)) or not 0.0 < float(threshold) <= 1.0:
        raise DataError(
            f"expected a Jaccard threshold in (0, 1], got {threshold!r}; 0.8 (the default) removes "
            "documents that share 80 % of their word n-grams",
            step=_STEP,
        )
    if not isinstance(ngram, int) or isinstance(ngram, bool) or ngram < 1:
        raise DataError(f"expected ngram to be an integer >= 1, got {ngram!r}; 5 is the default", step=_STEP)
    if not isinstance(num_perm, int) or isinstance(num_perm, bool) or num_perm < 2:
        raise DataError(
            f"expected num_perm to be an integer >= 2, got {num_perm!r}; 128 is the default", step=_STEP
        )


def clusters_removed(pairs: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, int]:
    """The documents confirmed pairs connect to a smaller-keyed one, and how many clusters they form.

    Args:
        pairs: confirmed ``(n, 2)`` doc id pairs.
        keys: ``(n, 2, 2)`` uint64: each side's ``(key_hi, key_lo)``.

    Returns:
        ``(removed doc ids sorted, clusters)``: every member of a cluster but its smallest key.
    """
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    key_of: dict[int, tuple[int, int, int]] = {}
    for (a, b), ((ah, al), (bh, bl)) in zip(pairs.tolist(), keys.tolist()):
        key_of[a], key_of[b] = (ah, al, a), (bh, bl, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[int, list[int]] = {}
    for doc in key_of:
        members.setdefault(find(doc), []).append(doc)
    removed = []
    for group in members.values():
        keeper = min(group, key=key_of.__getitem__)
        removed.extend(d for d in group if d != keeper)
    return np.array(sorted(removed), dtype=np.int64), len(members)


@dataclass(frozen=True)
class DedupResult:
    """What :func:`deduplicate` kept and removed.

    Attributes:
        keep: ascending int64 indices (into the input) of the documents kept.
        exact_removed: documents removed as exact duplicates (same normalised text).
        near_removed: documents removed as near-duplicates (exact n-gram Jaccard ≥ threshold).
        short_documents: documents with fewer than ``ngram`` words (deduplicated exactly only).
    """

    keep: np.ndarray
    exact_removed: int
    near_removed: int
    short_documents: int = 0


def _as_text(value: object, index: int) -> str:
    if not isinstance(value, str):
        raise DataError(
            f"expected every document to be a string, got {type(value).__name__} at index {index}; "
            "drop or convert missing texts in 'clean'",
            step="dedup",
        )
    return value


def _keys(texts: Sequence[str]) -> np.ndarray:
    """``(n, 2)`` uint64: each text's key (the 128-bit hash of its normalised text) as ``(hi, lo)``."""
    out = np.empty((len(texts), 2), dtype=np.uint64)
    for i, text in enumerate(texts):
        key = normalised_digest(text, xxhash.xxh3_128())
        out[i] = (key >> 64, key & 0xFFFFFFFFFFFFFFFF)
    return out


def _confirmed(texts: Sequence[str], pairs: np.ndarray, threshold: float, ngram: int) -> np.ndarray:
    """Which ``(i, j)`` index pairs reach ``threshold`` (exact n-gram Jaccard; short texts: equal words)."""
    sets: dict[int, np.ndarray] = {}
    out = np.zeros(len(pairs), dtype=bool)
    for n, (i, j) in enumerate(pairs.tolist()):
        a = sets.setdefault(i, shingle_set(texts[i], ngram))
        b = sets.setdefault(j, shingle_set(texts[j], ngram))
        if not len(a) and not len(b):
            out[n] = words(texts[i]) == words(texts[j])
            continue
        inter = len(np.intersect1d(a, b, assume_unique=True))
        out[n] = inter / (len(a) + len(b) - inter) >= threshold
    return out


def deduplicate(
    texts: Iterable[str], *, threshold: float = 0.8, ngram: int = 5, num_perm: int = 128, seed: int = 0
) -> DedupResult:
    """Removes exact and near-duplicate documents in memory, by the rule of the ``dedup`` step.

    Every cluster of duplicates (exact: the same key; near: confirmed pairs, connected) keeps
    the document with the smallest key; the result does not depend on the order of ``texts``.

    Args:
        texts: the documents (cleaned text).
        threshold: the word n-gram Jaccard similarity at or above which two documents are
            near-duplicates, in (0, 1].
        ngram: words per n-gram; documents with fewer words are deduplicated exactly only.
        num_perm: MinHash permutations (more: fewer missed pairs, slower).
        seed: the MinHash seed.

    Returns:
        A :class:`DedupResult`: the kept indices (ascending) and how many each kind removed.

    Raises:
        DataError: a parameter out of range, or a text that is not a string.
    """
    check_params(threshold, ngram, num_perm)
    texts = [_as_text(t, i) for i, t in enumerate(texts)]
    keys = _keys(texts)
    # Exact duplicates: one of each key, the one with the smallest hash of its own text kept (as
    # the dedup step's canonical order does; identical texts: the first).
    own = [xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: (int(keys[i, 0]), int(keys[i, 1]), own[i], i))
    keep = np.zeros(len(texts), dtype=bool)
    seen: set[tuple[int, int]] = set()
    for i in order:
        key = (int(keys[i, 0]), int(keys[i, 1]))
        if key not in seen:
            seen.add(key)
            keep[i] = True
    exact_removed = int((~keep).sum())
    rows = np.flatnonzero(keep)
    band, band_rows, _ = band_keys([texts[i] for i in rows], threshold, ngram, num_perm, seed)
    short = sum(few_words(t, ngram) for t in texts)
    pairs = pairs_of_groups(band, rows[band_rows].astype(np.int64))
    pairs = pairs[_confirmed(texts, pairs, threshold, ngram)] if len(pairs) else pairs
    removed, _ = clusters_removed(pairs, keys[pairs].reshape(-1, 2, 2) if len(pairs) else np.empty((0, 2, 2)))
    keep[removed] = False
    return DedupResult(
        keep=np.flatnonzero(keep).astype(np.int64),
        exact_removed=exact_removed,
        near_removed=len(removed),
        short_documents=short,
    )


def straddling_pairs(
    train_texts: Sequence[str], val_texts: Sequence[str], *, threshold: float = 0.8, ngram: int = 5
) -> list[tuple[int, int, float]]:
    """Near-duplicate pairs across two sets of documents (e.g. the train and validation splits).

    Candidates come from MinHash LSH over both sets together; each is confirmed by its exact word
    n-gram Jaccard. Documents with fewer than ``ngram`` words pair only when their normalised texts
    are equal (similarity 1.0).

    Args:
        train_texts: the first set.
        val_texts: the second set.
        threshold: the Jaccard similarity at or above which a pair is reported, in (0, 1].
        ngram: words per n-gram.

    Returns:
        ``(train_index, val_index, jaccard)`` for every pair at or above the threshold, sorted.

    Raises:
        DataError: a parameter out of range, or a text that is not a string.
    """
    check_params(threshold, ngram, 128)
    texts = [_as_text(t, i) for i, t in enumerate([*train_texts, *val_texts])]
    n_train = len(train_texts)
    band, rows, _ = band_keys(texts, threshold, ngram, 128, 0)
    pairs = pairs_of_groups(band, rows.astype(np.int64))
    found = []
    for i, j in pairs.tolist():
        if not (i < n_train <= j):
            continue
        a, b = shingle_set(texts[i], ngram), shingle_set(texts[j], ngram)
        if not len(a) and not len(b):
            if words(texts[i]) == words(texts[j]):
                found.append((i, j - n_train, 1.0))
            continue
        inter = len(np.intersect1d(a, b, assume_unique=True))
        similarity = inter / (len(a) + len(b) - inter)
        if similarity >= threshold:
            found.append((i, j - n_train, similarity))
    return sorted(found)

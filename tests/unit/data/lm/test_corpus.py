"""``lightning_order.data.lm.corpus``: the standard library's documentation as an LM corpus."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from helpers import ROOT

from lightning_order.data.lm.corpus import STDLIB_CORPUS_MODULES, corpus_fingerprint, stdlib_corpus
from lightning_order.errors import DataError


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return stdlib_corpus()


def test_corpus_is_real_documentation_of_useful_size(corpus):
    assert len(corpus) > 1000
    assert sum(len(d.encode()) for d in corpus) > 500_000
    assert min(len(d) for d in corpus) >= 120
    text = "\n".join(corpus)
    for phrase in ("Return", "argument", "assert statement"):
        assert phrase.lower() in text.lower(), phrase


def test_corpus_holds_naturally_repeated_documents(corpus):
    # Inherited docstrings: the same text documents several methods, so deduplication has work.
    repeated = [n for n in Counter(corpus).values() if n > 1]
    assert len(repeated) >= 20


def test_module_list_is_sorted_and_free_of_side_effects():
    assert list(STDLIB_CORPUS_MODULES) == sorted(STDLIB_CORPUS_MODULES)
    assert len(set(STDLIB_CORPUS_MODULES)) == len(STDLIB_CORPUS_MODULES)
    for banned in ("antigravity", "this", "tkinter", "idlelib", "turtle", "os", "socket", "asyncio"):
        assert banned not in STDLIB_CORPUS_MODULES


def test_deterministic_and_prefix_by_max_documents(corpus):
    assert stdlib_corpus() == corpus
    assert stdlib_corpus(max_documents=50) == corpus[:50]
    assert stdlib_corpus(max_documents=0) == []


def test_same_fingerprint_in_a_fresh_process_with_another_hash_seed(corpus):
    code = (
        "from lightning_order.data.lm.corpus import stdlib_corpus, corpus_fingerprint;"
        "print(corpus_fingerprint(stdlib_corpus()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == corpus_fingerprint(corpus)


def test_fingerprint_is_order_and_boundary_sensitive():
    assert corpus_fingerprint(["ab", "c"]) == corpus_fingerprint(["ab", "c"])
    assert corpus_fingerprint(["ab", "c"]) != corpus_fingerprint(["a", "bc"])
    assert corpus_fingerprint(["ab", "c"]) != corpus_fingerprint(["c", "ab"])
    assert corpus_fingerprint([]) != corpus_fingerprint([""])
    assert len(corpus_fingerprint(["x"])) == 32


def test_negative_max_documents_is_a_data_error():
    with pytest.raises(DataError, match="max_documents"):
        stdlib_corpus(max_documents=-1)

"""The LM order-error lab (``benchmarks/lm_lab.py``): its pure parts, and one tiny run of every case.

The tiny run trains for real (1 seed, 40 steps of a 2-layer model) and asserts what each faulty
run must show: the rule the validator named before step 1, and the cost the case is about. The
lab script is imported through ``importlib`` because ``benchmarks/`` is not a package. Its
per-rank tokenizer case in real DDP: tests/distributed/test_lm_lab_ddp.py.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from helpers import exact_jaccard, load_benchmark

from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.steps import clean_document

lab = load_benchmark("lm_lab")


def test_dirt_is_exactly_what_cleaning_removes():
    rng = random.Random(0)
    for doc in stdlib_corpus(200):
        dirty = lab.dirty(doc, rng)
        assert clean_document(dirty) == clean_document(doc)
    assert any(lab.dirty(d, rng) != d for d in stdlib_corpus(20))


def test_pack_stream_cuts_blocks_of_block_size_plus_one():
    blocks, dropped = lab.pack_stream(np.arange(10, dtype=np.int32), 2)
    assert blocks.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]] and dropped == 1


def test_mirror_copies_are_near_duplicates_not_exact_ones():
    rng = random.Random(0)
    docs = [d for d in stdlib_corpus(300) if len(d.split()) >= 60]
    similar = [exact_jaccard(clean_document(d), clean_document(lab.near_copy(d, rng))) for d in docs]
    assert all(s < 1.0 for s in similar)
    assert sum(s >= 0.8 for s in similar) >= 0.9 * len(similar)


def test_steps_to_target():
    curve = [(10, 3.0), (20, 2.5), (30, 2.2)]
    assert lab.steps_to_target(curve, 2.5) == 20
    assert lab.steps_to_target(curve, 2.0) is None


def test_every_case_names_a_known_rule():
    from lightning_order import RULES

    assert {c.name for c in lab.CASES} >= {
        "vocab-before-clean",
        "vocab-changed-after-init",
        "pack-without-eos",
        "dedup-after-split",
    }
    for case in lab.CASES:
        assert set(case.expected_rules) <= set(RULES)


@pytest.mark.slow
def test_tiny_lab_catches_every_case_and_measures_its_cost(tmp_path):
    lab.main(["--tiny", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "lm_results.json").read_text())
    runs = {r["case"]: r for r in results["runs"]}
    assert results["correct_validator_rules"] == []
    assert runs["correct"]["error"] is None and runs["correct"]["eos_generation_rate"] is not None
    summary = {row["case"]: row for row in results["summary"]}
    for name in ("vocab-before-clean", "vocab-changed-after-init", "pack-without-eos", "dedup-after-split"):
        assert summary[name]["caught_before_step_1"], (name, summary[name]["validator_rules"])
    # A token added after init and used: the embedding has no row for it, the first step stops. Even
    # in warn mode the step-1 observation names it as it enters the embedding (the run cannot go on:
    # the embedding would fail on it with a bare IndexError, a device-side assert on a GPU).
    assert runs["vocab-changed-after-init"]["error"]["type"] == "OrderError"
    assert "entering the token embedding" in runs["vocab-changed-after-init"]["error"]["message"]
    assert runs["vocab-changed-after-init"]["error"]["step"] == 0
    # Without end-of-text the model never learned to stop.
    assert runs["pack-without-eos"]["eos_generation_rate"] == 0.0
    # Deduplicated after the split: near-duplicate pairs straddle it (the ledger counted them).
    assert runs["dedup-after-split"]["ledger"]["dedup"]["straddling"] > 0
    assert "straddling" not in runs["correct"]["ledger"]["dedup"]
    # The tokenizer trained before cleaning spent part of its vocabulary on dirt.
    assert runs["vocab-before-clean"]["dead_vocab_share"] > runs["correct"]["dead_vocab_share"]
    # Per-rank tokenizers: the two ranks' vocabularies disagree on most ids.
    assert runs["tokenizer-per-rank"]["tokens_with_the_same_id_on_both_ranks"] < 0.9
    assert runs["correct-ddp"]["tokens_with_the_same_id_on_both_ranks"] == 1.0
    assert (tmp_path / "lm_table.md").read_text().count("\n|") >= 6
    assert {p.name for p in tmp_path.glob("lm_*.png")} == {f"lm_{c.name}.png" for c in lab.CASES}

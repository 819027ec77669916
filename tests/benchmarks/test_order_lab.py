"""The order-error lab in its tiny configuration: every faulty run flagged with its rule, no correct run.

Runs ``benchmarks/order_lab.py --tiny`` end to end (real training, DDP with 2 CPU ranks for the
sharding case) and reads its ``results.json``. The lab script is imported through ``importlib``
because ``benchmarks/`` is not a package.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from ddp_utils import run_ranks_preloaded
from helpers import load_benchmark

lab = load_benchmark("order_lab")
study = load_benchmark("lab_false_alarms")


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("lab")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lab, "run_ranks", run_ranks_preloaded)  # its DDP ranks forked, imports done
        lab.main(["--tiny", "--out", str(out)])
    results = json.loads((out / "results.json").read_text())
    results["_out"] = str(out)
    return results


# -- the pure measurements ------------------------------------------------------------------------
def test_steps_to_target_and_target_loss():
    curve = [(10, 1.2), (20, 0.9), (30, 0.6), (40, 0.5)]
    target = lab.target_loss(curve, initial=1.5, fraction=0.9)
    assert target == pytest.approx(1.5 - 0.9 * 1.0)
    assert lab.steps_to_target(curve, target) == 30
    assert lab.steps_to_target(curve, 0.1) is None


def test_oscillation_separates_smooth_from_jumpy():
    smooth = [2.0 - 0.01 * t for t in range(60)]
    jumpy = [2.0 + (0.5 if t % 2 else -0.5) for t in range(60)]
    assert lab.oscillation(smooth) < 0.01 < 0.4 < lab.oscillation(jumpy)
    assert math.isnan(lab.oscillation([1.0]))


def test_unk_rate_and_dead_vocab_ignore_padding():
    import numpy as np

    ids = np.array([[5, 1, 0, 0], [1, 6, 7, 0]])
    mask = (ids != 0).astype(int)
    assert lab.unk_rate(ids, mask, unk_id=1) == pytest.approx(2 / 5)
    assert lab.dead_vocab_share(ids, mask, vocab_size=10) == pytest.approx(1 - 4 / 10)


def test_near_duplicate_key_ignores_dirt():
    assert lab.near_duplicate_key("<b>Goal</b> &amp; ##match!!!") == lab.near_duplicate_key("goal match")


def test_lab_corpus_holds_out_near_duplicates_together(tmp_path):
    corpus = lab.build_lab_corpus(tmp_path, size=600, seed=0, sources=3, test_fraction=0.2, label_noise=0.2)
    pool = [json.loads(line) for line in Path(corpus["pool"]).read_text().splitlines()]
    test = [json.loads(line) for line in Path(corpus["test"]).read_text().splitlines()]
    assert len(pool) + len(test) == 600 and 60 < len(test) < 200
    key = lab.near_duplicate_key
    assert not {key(r["text"]) for r in pool} & {key(r["text"]) for r in test}
    labels: dict[str, set] = {}
    for row in pool + test:  # near-duplicates share their (possibly noisy) label
        labels.setdefault(key(row["text"]), set()).add(row["label"])
    assert all(len(v) == 1 for v in labels.values())
    sources = [r["source"] for r in pool]
    assert sources == sorted(sources) and set(sources) == {0, 1, 2}  # contiguous blocks


def test_target_encoding_is_smoothed_class_shares_of_the_fitted_rows():
    table, prior = lab.lab_extras.target_encoding([0, 0, 0, 1], [1, 1, 0, 2], num_classes=3, smoothing=1.0)
    assert prior == pytest.approx([0.25, 0.5, 0.25])
    assert table[0] == pytest.approx([(1 + 0.25) / 4, (2 + 0.5) / 4, (0 + 0.25) / 4])
    rows = lab.lab_extras.encode_rows([{"shop": 0}, {"shop": 9}], table, prior)
    assert rows[1]["te_1"] == pytest.approx(0.5)  # a shop never fitted gets the prior
    # Near-duplicates (one key) share their shop; shops carry label information.
    assert lab.lab_extras.shop_of("a b", 2, 0, 100, 4) == lab.lab_extras.shop_of("a b", 2, 0, 100, 4)


def test_monitor_verdict_counts_only_the_right_rule():
    case = lab.CASES["vocab-before-clean"]
    run = {
        "monitor_diagnoses": [
            {"symptom": "plateau", "step": 80, "suspected_rule": None},
            {"symptom": "plateau", "step": 20, "suspected_rule": "vocab-before-clean"},
        ]
    }
    verdict = lab._monitor_verdict(run, case, max_steps=300)
    assert verdict["monitor_right"] and verdict["monitor_right_step"] == 20
    assert verdict["monitor_saved_pct"] == pytest.approx(100 * (1 - 20 / 300))
    assert verdict["monitor_wrong_rules"] == []


# -- the lab end to end ---------------------------------------------------------------------------
@pytest.mark.slow
def test_every_faulty_run_is_flagged_with_its_rule_before_step_one(tiny_results):
    runs = {(r["seed"], r["case"]): r for r in tiny_results["runs"]}
    assert set(tiny_results["summary"]) == set(lab.CASES)
    for name, case in lab.CASES.items():
        run = runs[(0, name)]
        # Every case, the target encoding computed outside the pipeline included (read off the data).
        assert set(run["validator_rules"]) & set(case.expected_rules), (name, run["validator_rules"])
        assert run["validator_flagged_before_step_1"], name
        if not case.in_ledger:  # computed before the datamodule: no ledger records it
            assert run["ledger_rules"] == [], name
            continue
        # The ledger (STANDARD_PIPELINE.check plus the init check) tells the same story.
        assert set(run["ledger_rules"]) & set(case.expected_rules), (name, run["ledger_rules"])


@pytest.mark.slow
def test_no_correct_run_is_flagged(tiny_results):
    correct = [r for r in tiny_results["runs"] if r["case"].startswith("correct")]
    assert {r["case"] for r in correct} == set(lab.BASELINES)
    for run in correct:
        assert run["validator_rules"] == [], run["validator_first_warning"]
        assert run["ledger_rules"] == []
        assert run["monitor_diagnoses"] == []
        assert run["error"] is None and run["global_step"] == tiny_results["config"]["max_steps"]


@pytest.mark.slow
def test_controls_name_no_order_error(tiny_results):
    controls = tiny_results["controls"]
    assert set(lab.CONTROLS) | set(lab.BASELINES) == set(controls)
    for name, entry in controls.items():
        assert entry["runs"] == 1 and entry["order_error_named"] == 0, (name, entry)
    boring = next(r for r in tiny_results["runs"] if r["case"] == "boring-model")
    assert boring["global_step"] == 64 and boring["monitor_diagnoses"] == []
    handwritten = next(r for r in tiny_results["runs"] if r["case"] == "handwritten")
    assert handwritten["unk_rate"] > 0.01 and handwritten["monitor_diagnoses"] == []


@pytest.mark.slow
def test_the_target_encoding_leak_is_named_though_its_ledger_is_clean(tiny_results):
    # The lab's faulty case: the encoding is fitted on train + validation before the datamodule, so
    # the ledger proves every fitted step of the pipeline on the train split; the data check does not
    # rule fit-before-split out, it finds it, and the monitor names it (single process and DDP).
    runs = {r["case"]: r for r in tiny_results["runs"]}
    for name in ("target-encoding", "target-encoding-ddp"):
        run = runs[name]
        assert run["ledger_rules"] == [] and "fit-before-split" in run["validator_rules"]
        facts = run["monitor_facts"]
        assert facts["fitted_on_train"] and facts["split_by_key"] and facts["label_checked"]
        (diagnosis,) = run["monitor_diagnoses"]
        assert diagnosis["symptom"] == "train-val-gap" and diagnosis["suspected_rule"] == "fit-before-split"
        assert diagnosis["evidence"]["trigger"] == "label-encoded-feature"
        assert diagnosis["step"] == tiny_results["config"]["val_every"]  # at the first validation
    # Its correct twin, the same encoding fitted on the train rows: the same proof, nothing named.
    assert (
        runs["correct-te"]["monitor_facts"]["fitted_on_train"]
        and runs["correct-te"]["monitor_diagnoses"] == []
    )


@pytest.mark.slow
def test_target_encoding_fits_on_the_datamodules_train_split(tiny_results):
    te = next(r for r in tiny_results["runs"] if r["case"] == "correct-te")
    assert {"te_0", "te_3"} <= set(te["feature_names"])


@pytest.mark.slow
def test_lab_writes_table_and_plots(tiny_results):
    out = Path(tiny_results["_out"])
    table = (out / "table.md").read_text()
    for name, case in lab.CASES.items():
        assert name in table and (out / f"loss_{name}.png").stat().st_size > 1000
        if case.in_claims:
            assert case.claimed_impact in table
    ddp = next(r for r in tiny_results["runs"] if r["case"] == "shard-before-normalize")
    assert ddp["devices"] == 2 and len(ddp["rank_losses"]) == 2
    # Each rank fitted its own statistics: they differ, which is the error being measured.
    assert ddp["rank_statistics"][0]["mean"] != ddp["rank_statistics"][1]["mean"]


# -- the false-alarm study's summaries (pure; the study itself is the docs' command) --------------------
def test_the_previous_statistic_is_recomputed_from_the_recorded_losses():
    # A run still learning fast: its last-10 mean lags above the validation loss at every validation.
    losses = [1.4 * 0.985**i for i in range(129)]
    at_validation = [43, 86, 129]
    val = [f * 1.4 * 0.985**n for f, n in zip((0.99, 0.97, 0.95), at_validation)]
    assert study.old_statistic(losses, at_validation, val)
    assert not study.old_statistic(losses, at_validation, [1.05 * 1.4 * 0.985**n for n in at_validation])


def test_the_study_counts_symptoms_and_order_errors_per_shape():
    shape = study.SHAPES["issue-27"]
    named = {"symptom": "train-val-gap", "suspected_rule": "fit-before-split", "kind": "leakage"}
    symptom = {"symptom": "train-val-gap", "suspected_rule": None, "kind": "leakage"}
    runs = [
        {"diagnoses": [], "error": None, "old_leakage": True, "readings": {"val": [1, 2, 3]}},
        {"diagnoses": [symptom], "error": None, "old_leakage": True, "readings": {"val": [1, 2, 3]}},
        {"diagnoses": [named], "error": None, "old_leakage": False, "readings": {"val": [1, 2, 3]}},
    ]
    summary = study.summarise_study(shape, runs)
    assert (summary["runs"], summary["any_symptom"], summary["order_error_named"]) == (3, 2, 1)
    assert (summary["leakage_new"], summary["leakage_old"], summary["validations"]) == (2, 2, 9)
    results = {
        "runs_per_shape": 3,
        "first_seed": 1000,
        "shapes": {
            "issue-27": {"shape": vars(shape), "summary": summary},
            "copies": {"shape": vars(study.SHAPES["copies"]), "summary": summary},
        },
    }
    table = study.render_study(results, "python benchmarks/order_lab.py --false-alarms 3")
    assert "| issue-27 |" in table and "| copies |" in table and "--false-alarms 3" in table

"""Label-aware leakage: a target encoding fitted on train + validation rows is ``fit-before-split``.

Real data (``label_data.py``): the standard library's functions, their module as the category,
whether their docstring says what they return as the label. The pure check, then the validator
and the monitor on a hand-written datamodule (no glue), and an OrderedDataModule reading the
encoded columns from a file.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from ddp_utils import read_json, run_script
from helpers import quiet_trainer
from label_data import FunctionsClassifier, FunctionsData, feature_table, stdlib_rows, target_encoding
from torch.utils.data import DataLoader

from lightning_order import (
    OrderedDataModule,
    OrderedTextClassifier,
    OrderError,
    OrderValidator,
    OrderWarning,
    SymptomMonitor,
)
from lightning_order.callbacks.labels import join_rank_parts
from lightning_order.checks.label_encoding import check_label_encoded_features, label_encoding_fits
from lightning_order.checks.symptoms import RunFacts, attribute, detect_label_leak


# -- the pure check ---------------------------------------------------------------------------------
def test_an_encoding_fitted_on_train_and_validation_is_fit_before_split() -> None:
    (violation,) = check_label_encoded_features(
        *feature_table(stdlib_rows(), leak=True), names=["a", "b", "c", "d", "te"]
    )
    assert violation.rule == "fit-before-split"
    assert violation.steps == ("fit_features", "split")
    assert "te in the features encode the label" in violation.message
    (column,) = violation.details["columns"]
    assert column["name"] == "te" and column["ratio"] > 5  # measured: 9.2 (a sound fit: 0.2)
    assert violation.details["kind"] == "label-encoding"


def test_an_encoding_fitted_on_train_only_and_natural_features_pass() -> None:
    rows = stdlib_rows()
    assert check_label_encoded_features(*feature_table(rows, leak=False)) == []
    # The encoding is found and fits the train-only mean best (no false alarm on a sound fit).
    (fit,) = label_encoding_fits(*feature_table(rows, leak=False))
    assert fit.column == 4 and fit.fit_train > fit.fit_all and fit.ratio < 1
    natural = rows.natural.astype(np.float32)
    train, val = ~rows.is_val, rows.is_val
    assert label_encoding_fits(natural[train], rows.label[train], natural[val], rows.label[val]) == []


def test_the_check_is_affine_invariant_and_reads_real_valued_labels() -> None:
    rows = stdlib_rows()
    tx, ty, vx, vy = feature_table(rows, leak=True)
    both = np.concatenate([tx, vx])
    mean, std = both.mean(0), both.std(0)  # standardised, as a fitted normaliser leaves it
    assert check_label_encoded_features((tx - mean) / std, ty, (vx - mean) / std, vy)
    # A real-valued target (the docstring's log length), encoded per module on all rows.
    target = rows.natural[:, 0]
    positives = np.bincount(rows.module, weights=target)
    counts = np.bincount(rows.module)
    encoded = ((positives + target.mean()) / (counts + 1))[rows.module][:, None]
    train, val = ~rows.is_val, rows.is_val
    found = check_label_encoded_features(encoded[train], target[train], encoded[val], target[val])
    assert [v.rule for v in found] == ["fit-before-split"]


def test_too_little_evidence_gives_no_verdict() -> None:
    tx, ty, vx, vy = feature_table(stdlib_rows(), leak=True)
    assert check_label_encoded_features(tx, ty, vx[:20], vy[:20]) == []  # under min_val_rows
    assert check_label_encoded_features(tx[:, :4], ty, vx[:, :4], vy) == []  # no encoding
    assert label_encoding_fits(tx, ty[:-1], vx, vy) == []  # labels that do not match the rows


def test_shards_are_joined_and_a_whole_split_is_kept_once() -> None:
    x, y = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6)

    def part(rows, digest):
        return {
            "x": x[rows],
            "y": y[rows],
            "names": ["a", "b"],
            "sampled": False,
            "digest": digest,
        }

    joined = join_rank_parts([part(slice(0, 3), "r0"), part(slice(3, 6), "r1")])
    assert np.array_equal(joined["x"], x) and np.array_equal(joined["y"], y)
    whole = join_rank_parts([part(slice(0, 6), "same"), part(slice(0, 6), "same")])
    assert len(whole["y"]) == 6  # a DistributedSampler pipeline: every rank holds the whole split
    assert join_rank_parts([part(slice(0, 3), "r0"), None]) is None


def test_the_monitor_detector_names_fit_before_split() -> None:
    (violation,) = check_label_encoded_features(*feature_table(stdlib_rows(), leak=True))
    diagnosis = detect_label_leak(violation.details["columns"], train_loss=0.5, val_loss=0.45, step=50)
    assert diagnosis.symptom == "train-val-gap" and diagnosis.suspected_rule == "fit-before-split"
    assert diagnosis.evidence["trigger"] == "label-encoded-feature" and diagnosis.step == 50
    assert attribute(diagnosis, RunFacts()).suspected_rule == "fit-before-split"
    assert detect_label_leak([{"name": "te", "ratio": 1.2}], train_loss=0.5, val_loss=0.4) is None


# -- the callbacks on a hand-written datamodule (no glue) ------------------------------------------------
def test_validator_stops_a_leaky_target_encoding_before_step_1(tmp_path: Path) -> None:
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=5)
    with pytest.raises(OrderError, match="fit-before-split") as caught:
        trainer.fit(FunctionsClassifier(), FunctionsData(leak=True))
    assert "column 4 of input 0" in str(caught.value) and trainer.global_step == 0


def test_validator_and_monitor_pass_a_sound_target_encoding(tmp_path: Path) -> None:
    monitor = SymptomMonitor(verbose=False)
    validator = OrderValidator()
    trainer = quiet_trainer(tmp_path, [validator, monitor], max_epochs=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        trainer.fit(FunctionsClassifier(), FunctionsData(leak=False))
    assert validator.violations == [] and monitor.diagnoses == []


@pytest.mark.parametrize("with_validator", [True, False])
def test_monitor_names_the_leak_at_the_first_validation(tmp_path: Path, with_validator: bool) -> None:
    monitor = SymptomMonitor(verbose=False)
    callbacks = [OrderValidator(on_violation="warn"), monitor] if with_validator else [monitor]
    trainer = quiet_trainer(tmp_path, callbacks, max_epochs=2)
    with pytest.warns(OrderWarning, match="label-encoded"):
        trainer.fit(FunctionsClassifier(), FunctionsData(leak=True))
    (diagnosis,) = monitor.diagnoses
    assert diagnosis.suspected_rule == "fit-before-split"
    assert diagnosis.step == trainer.num_training_batches  # the first validation: end of epoch 1
    # Without a validator the monitor read the splits itself; turned off, it cannot know.
    quiet = SymptomMonitor(verbose=False, label_check_rows=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        quiet_trainer(tmp_path, [quiet], max_epochs=1).fit(FunctionsClassifier(), FunctionsData(leak=True))
    assert quiet.diagnoses == []


# -- OrderedDataModule: the encoded column comes in the input file ---------------------------------------
def _write_rows(path: Path, leak: bool) -> list[str]:
    rows = stdlib_rows()
    encoded = target_encoding(rows, np.ones_like(rows.is_val) if leak else ~rows.is_val)
    words = ["returns", "yields", "raises", "makes", "reads", "writes"]
    with path.open("w") as handle:
        for i, (label, module) in enumerate(zip(rows.label, rows.module)):
            text = f"function {i} of module {module} {words[i % len(words)]} a value"
            handle.write(json.dumps({"text": text, "label": int(label), "te": float(encoded[i])}) + "\n")
    return ["te"]


def test_ordered_datamodule_with_a_leaky_encoding_column(tmp_path: Path) -> None:
    # Fitted on every row: a leak whatever split the datamodule makes. (The sound side needs the
    # datamodule's own split; the order lab's correct target-encoding runs cover it.)
    data = tmp_path / "rows.jsonl"
    columns = _write_rows(data, leak=True)
    dm = OrderedDataModule(
        dataset="json",
        data_files=str(data),
        numeric_columns=columns,
        cache_dir=str(tmp_path / "c"),
        vocab_size=100,
        max_length=16,
        batch_size=64,
    )
    dm.prepare_data()
    validator = OrderValidator(on_violation="warn")
    trainer = quiet_trainer(tmp_path, [validator], max_steps=1, limit_val_batches=0)
    with pytest.warns(OrderWarning, match="fit-before-split"):
        trainer.fit(_text_model(dm), dm)
    (violation,) = [v for v in validator.violations if v.details.get("kind") == "label-encoding"]
    assert violation.details["columns"][0]["name"] == "features[te]"


def _text_model(dm: OrderedDataModule) -> pl.LightningModule:
    return OrderedTextClassifier(**dm.dims)


# -- under DDP: every rank's shard joined, the same verdict on every rank -------------------------------
@pytest.mark.slow
def test_ddp_shards_are_joined_and_every_rank_agrees(tmp_path: Path) -> None:
    """Three cases in one 2-rank launch: a leak with the validator, a leak with the monitor alone,
    a sound encoding with the validator."""
    run_script("label_ddp.py", tmp_path, timeout=400)
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in range(2)]
    for mode, callbacks in (("leak", "validator"), ("leak", "monitor"), ("sound", "validator")):
        for per_rank in ranks:
            result = per_rank[f"{mode}-{callbacks}"]
            assert result["world_size"] == 2
            rules = [(v["rule"], v["details"].get("kind")) for v in result["violations"]]
            named = [(d["symptom"], d["suspected_rule"]) for d in result["diagnoses"]]
            if mode == "sound":
                assert rules == [] and named == [], (mode, callbacks)
                continue
            if callbacks == "validator":
                assert rules == [("fit-before-split", "label-encoding")]
            # The monitor names it at the first validation (the end of epoch 1), with or without a validator.
            assert named == [("train-val-gap", "fit-before-split")], (mode, callbacks)
            assert result["diagnoses"][0]["step"] == result["steps_per_epoch"]


def test_data_that_cannot_hold_an_encoding_is_left_after_a_probe() -> None:
    from lightning_order.callbacks.labels import split_columns

    class Counting(torch.utils.data.Dataset):
        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y, self.reads = x, y, 0

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int):
            self.reads += 1
            return self.x[i], self.y[i]

    class Data:
        def __init__(self, dataset) -> None:
            self.dataset = dataset

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.dataset, batch_size=8)

    g = torch.Generator().manual_seed(0)
    continuous = Counting(torch.randn(5000, 3, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert split_columns(Data(continuous), "train", 100_000) is None and continuous.reads == 256
    images = Counting(torch.randn(5000, 3, 16, 16, generator=g), torch.randint(0, 2, (5000,), generator=g))
    assert split_columns(Data(images), "train", 100_000) is None and images.reads == 256
    encoded = Counting(
        torch.randint(0, 9, (5000, 1), generator=g).float(), torch.randint(0, 2, (5000,), generator=g)
    )
    read = split_columns(Data(encoded), "train", 100_000)
    assert read["x"].shape == (5000, 1) and encoded.reads == 5000

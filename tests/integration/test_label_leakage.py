"""Label-aware leakage in real ``Trainer.fit`` runs: the validator and the monitor on a hand-written
datamodule (no glue) with a target encoding fitted on train + validation rows, a sound encoding, and
an OrderedDataModule reading the encoded columns from a file.

Real data (``label_data.py``): the standard library's functions, their module as the category,
whether their docstring says what they return as the label. The pure check:
tests/unit/checks/test_label_encoding.py; under DDP: tests/distributed/test_label_encoding_ddp.py.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
from helpers import quiet_trainer
from label_data import FunctionsClassifier, FunctionsData, stdlib_rows, target_encoding

from lightning_order import (
    OrderedDataModule,
    OrderedTextClassifier,
    OrderError,
    OrderValidator,
    OrderWarning,
    SymptomMonitor,
)


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

"""Hand-written pipelines (plain LightningDataModule + LightningModule on real text): one test per
classic order mistake, each asserting the exact rule code and the lightning_order lines it needed.

The pipelines live in tests/handwritten.py; the DDP mistakes (``random_split`` without a
generator, per-rank statistics) and the correct pipeline under DDP run in one DDP launch
(tests/distributed/test_handwritten_ddp.py).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest
import torch
from handwritten import (
    DocsClassifier,
    DocsData,
    LatePadData,
    NoDedupeData,
    RawVocabData,
    RecordedDocsData,
    StatsBeforeSplitData,
    build,
    glue_lines,
)
from helpers import ROOT, quiet_trainer

from lightning_order import (
    OrderError,
    OrderValidator,
    OrderWarning,
)

NAMESPACES = ("pytorch_lightning", "lightning.pytorch")


def _trainer(ns: Any, validator: OrderValidator | None = None) -> Any:
    short = {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1}
    return quiet_trainer(None, [validator or OrderValidator()], ns=ns, **short)


def _model_for(dm: Any, model_cls: type = DocsClassifier, **kwargs: Any) -> Any:
    dm.setup("fit")  # the classic user code: set the data up, size the model from it
    return model_cls(**{"vocab_size": dm.vocab_size, **kwargs})


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_correct_pipeline_is_silent_under_both_namespaces(namespace):
    ns = importlib.import_module(namespace)
    data_cls, model_cls = build(ns)
    dm = data_cls()
    model = _model_for(dm, model_cls)
    validator = OrderValidator()
    trainer = _trainer(ns, validator)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, dm)
    assert trainer.global_step == 2
    assert validator.violations == []
    assert not [w for w in caught if issubclass(w.category, OrderWarning)]


def test_recorded_correct_pipeline_is_silent_and_records_every_step():
    dm = RecordedDocsData()
    model = _model_for(dm)
    validator = OrderValidator()
    trainer = _trainer(importlib.import_module("pytorch_lightning"), validator)
    trainer.fit(model, dm)
    assert trainer.global_step == 2 and validator.violations == []
    steps = dm.ledger.steps()
    assert steps[:5] == ["load", "clean", "split", "fit_features", "build_vocab"]
    assert steps[-4:] == ["init_model", "configure_optimizers", "train", "evaluate"]
    split, fitted = dm.ledger.latest("split"), dm.ledger.latest("fit_features")
    assert fitted.fitted_on == split.parts["train"]  # learned from the train split, proven
    assert split.inputs == {"clean": dm.ledger.latest("clean").output}
    # What the ledger recorded is this run's data identity: compared across ranks, kept in checkpoints.
    assert validator.fingerprints == {
        "split": split.output,
        "statistics": fitted.output,
        "vocab": dm.ledger.latest("build_vocab").output,
    }
    assert glue_lines(RecordedDocsData) == 5


@pytest.mark.parametrize(
    ("data_cls", "model_kwargs", "rule", "glue"),
    [
        (StatsBeforeSplitData, {}, "fit-before-split", 2),
        (RawVocabData, {}, "vocab-before-clean", 3),
        (DocsData, {"vocab_size": 300}, "init-before-data", 0),  # hard-coded vocab size
        (LatePadData, {}, "init-before-data", 0),  # pad token added after the model was built
        (NoDedupeData, {}, "train-val-overlap", 0),  # exact duplicates straddle the split
    ],
    ids=["stats-before-split", "vocab-on-raw-text", "hard-coded-vocab-size", "pad-after-model", "no-dedupe"],
)
def test_classic_mistake_is_caught_before_step_one(data_cls, model_kwargs, rule, glue):
    dm = data_cls()
    model = _model_for(dm, **model_kwargs)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = _trainer(importlib.import_module("pytorch_lightning"))
    with pytest.raises(OrderError) as caught:
        trainer.fit(model, dm)
    assert rule in caught.value.rules, caught.value.rules
    assert trainer.global_step == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert glue_lines(data_cls) == glue <= 5


def test_no_dedupe_reports_the_twin_rate_against_the_threshold():
    dm = NoDedupeData()
    model = _model_for(dm)
    with pytest.raises(OrderError) as caught:
        _trainer(importlib.import_module("pytorch_lightning")).fit(model, dm)
    (violation,) = [v for v in caught.value.violations if v.rule == "train-val-overlap"]
    assert violation.details["rate"] > violation.details["threshold"] == 0.01
    assert "validation rows checked" in violation.message and "threshold of 1.0%" in violation.message
    # Stating a threshold above the observed rate lets the run through.
    validator = OrderValidator(overlap_threshold=min(1.0, violation.details["rate"] + 0.01))
    trainer = _trainer(importlib.import_module("pytorch_lightning"), validator)
    trainer.fit(_model_for(NoDedupeData()), NoDedupeData())
    assert validator.violations == [] and trainer.global_step == 2


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_the_adoption_example_in_docs_runs_silently_under_both_namespaces(namespace, monkeypatch):
    """docs/validator.md's complete example, as written (with each namespace's import line)."""
    import re

    text = (ROOT / "docs" / "validator.md").read_text()
    example = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "class Reviews" in b)
    example = example.replace("import lightning.pytorch as L", f"import {namespace} as L")
    example = example.replace("max_epochs=3", "max_epochs=1, logger=False, enable_checkpointing=False")
    scope: dict = {"__name__": "docs_example"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(example, "docs/validator.md", "exec"), scope)
    trainer, dm = scope["trainer"], scope["dm"]
    (validator,) = [c for c in trainer.callbacks if isinstance(c, OrderValidator)]
    assert trainer.global_step > 0 and validator.violations == []
    assert dm.ledger.steps()[:4] == ["load", "clean", "split", "build_vocab"]

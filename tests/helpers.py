"""Helpers shared by the test files (one copy of each)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytorch_lightning as pl

from lightning_order.ledger import StepLedger

ROOT = Path(__file__).resolve().parents[1]
DEMO = str(ROOT / "configs" / "demo.yaml")
#: A tiny demo configuration for CLI tests: seconds, not minutes.
TINY = ["--data.demo_size=300", "--data.vocab_size=200", "--data.max_length=32"]


def quiet_trainer(
    tmp_path: Path | str | None = None, callbacks: list | None = None, *, ns: Any = pl, **kwargs: Any
) -> pl.Trainer:
    """A CPU ``Trainer`` that prints and writes nothing it is not asked to.

    No logger, checkpointing, progress bar, model summary or sanity validation; ``kwargs``
    override any of it (``enable_checkpointing=True``, ``max_steps=...``). ``ns`` is the
    Lightning namespace whose ``Trainer`` is built (``pytorch_lightning`` or ``lightning.pytorch``).
    """
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": str(tmp_path) if tmp_path is not None else None,
    }
    return ns.Trainer(callbacks=list(callbacks or []), **{**options, **kwargs})


def clean_ledger() -> StepLedger:
    """The data steps of the standard pipeline in order, each consuming what the step before made."""
    ledger = StepLedger(info={"dims": {"vocab_size": 10}})
    load = ledger.record("load", stats={"rows": 10})
    clean = ledger.record("clean", inputs={"load": load.output}, stats={"rows": 10})
    feats = ledger.record("engineer_features", inputs={"clean": clean.output})
    split = ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": feats.output},
        parts={"train": "t" * 32, "val": "v" * 32},
        stats={"train_rows": 9, "val_rows": 1},
    )
    stats = ledger.record(
        "fit_features", inputs={"split": split.parts["train"]}, fitted_on=split.parts["train"]
    )
    vocab = ledger.record(
        "build_vocab",
        inputs={"clean": clean.output, "split": split.parts["train"]},
        fitted_on=split.parts["train"],
    )
    ledger.record("encode", inputs={"fit_features": stats.output, "build_vocab": vocab.output})
    return ledger


def leaky_ledger() -> StepLedger:
    """Statistics fitted on the validation part: fit-before-split."""
    ledger = StepLedger()
    load = ledger.record("load")
    clean = ledger.record("clean", inputs={"load": load.output})
    feats = ledger.record("engineer_features", inputs={"clean": clean.output})
    split = ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": feats.output},
        parts={"train": "t" * 32, "val": "v" * 32},
    )
    ledger.record("fit_features", inputs={"split": split.parts["train"]}, fitted_on=split.parts["val"])
    return ledger


def readme_training_example(tmp_path: Path, monkeypatch: Any, namespace_module: str | None = None) -> dict:
    """Run the README's ``trainer.fit`` example verbatim on a small ``reviews.csv`` in ``tmp_path``.

    Args:
        tmp_path: the folder the example runs in (it writes ``reviews.csv`` and its cache there).
        monkeypatch: pytest's fixture, to change directory and the cache root.
        namespace_module: ``"lightning.pytorch"`` to run the example under that namespace instead
            of the ``pytorch_lightning`` it imports.

    Returns:
        The example's globals (``trainer``, ``dm``, ``model``).
    """
    import csv
    import re

    from lightning_order.data.text.demo import demo_rows

    with open(tmp_path / "reviews.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label", "price", "stars"])
        writer.writeheader()
        for row in demo_rows(400, seed=1):
            writer.writerow(
                {"text": row["text"], "label": row["label"], "price": row["amount"], "stars": row["score"]}
            )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(tmp_path / "cache"))
    readme = (ROOT / "README.md").read_text()
    example = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "trainer.fit" in b)
    assert "import pytorch_lightning as pl" in example
    if namespace_module is not None:
        example = example.replace("import pytorch_lightning as pl", f"import {namespace_module} as pl")
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(example, "README.md", "exec"), namespace)
    return namespace


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module: the benchmarks are scripts, not a package.

    Registered in ``sys.modules`` under ``name`` first (its dataclasses and pickled functions
    resolve their module by name).
    """
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module

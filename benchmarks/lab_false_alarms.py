"""The order-error lab's false-alarm study: correct runs of many shapes, many initialisations each.

The lab's detection table measures each order error on one configuration. A monitor that names an
order error on a correct run loses the user's trust in every other diagnosis (issue 27: 6 of 20
correct runs of a new user's first try were told "likely order error: fit-before-split"). This
study trains correct runs of several shapes (data size, batch size, learning rate, epochs, a
model with dropout, the hand-written pipeline, 2-rank DDP), each with ``OrderValidator()`` and
``SymptomMonitor()`` at their defaults and the model's initialisation varied by
``torch.manual_seed(1000 + i)``, and counts the runs with any symptom and the runs naming an
order error (the target is 0). Two faulty shapes beside them measure what the train/validation
statistic can still see from the curves alone (no validator, no ledger): validation rows copied
from train, and validation rows trained on four times per epoch.

For every run the train/validation statistic of the previous version (the mean of the last 10
train losses against the validation loss) is recomputed from the recorded losses, so the table
shows what the like-with-like statistic changed on the very same runs.

Used by ``order_lab.py --false-alarms RUNS``; one function per shape of run, pure summaries.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lab_extras

__all__ = ["SHAPES", "Shape", "old_statistic", "render_study", "run_study", "summarise_study"]

#: The first initialisation seed; run ``i`` uses ``torch.manual_seed(FIRST_SEED + i)``.
FIRST_SEED = 1000
_OLD_NEAR = 10  # the previous version's train loss at a validation: the mean of the last 10 steps


@dataclass(frozen=True)
class Shape:
    """One shape of run.

    Attributes:
        name: a short name (the table's first column).
        varies: what this shape changes against the issue's reproduction, in words.
        kind: ``"text"`` (``OrderedDataModule``), ``"handwritten"`` (``tests/handwritten.py``),
            ``"ddp"`` (the lab's correct run on 2 CPU ranks), ``"copies"`` (validation = train
            rows) or ``"repeated"`` (validation rows also trained on 4 times per epoch).
        correct: a correct run (a diagnosis naming an order error is a false alarm).
        demo_size: rows of the demo corpus.
        batch_size: rows per batch.
        lr: Adam's learning rate.
        epochs: epochs per run.
        model: ``"mean"`` (a mean of token embeddings and the features, one linear layer: the
            issue's model) or ``"classifier"`` (``OrderedTextClassifier``, with ``dropout``).
        dropout: the classifier's dropout.
        vocab_size: the tokenizer's target size.
    """

    name: str
    varies: str
    kind: str = "text"
    correct: bool = True
    demo_size: int = 3000
    batch_size: int = 64
    lr: float = 3e-3
    epochs: int = 3
    model: str = "mean"
    dropout: float = 0.1
    vocab_size: int = 8000


SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape(
            "issue-27",
            "the issue's reproduction: demo_size 3000, batch 64, mean of embeddings, Adam 3e-3, 3 epochs",
        ),
        Shape("small-data", "800 rows, batch 16", demo_size=800, batch_size=16),
        Shape("fast-long", "learning rate 1e-2, 6 epochs", lr=1e-2, epochs=6),
        Shape(
            "dropout",
            "OrderedTextClassifier with dropout 0.5 (it memorises): 1200 rows, vocabulary 2000, batch 32",
            demo_size=1200,
            batch_size=32,
            model="classifier",
            dropout=0.5,
            vocab_size=2000,
        ),
        Shape(
            "handwritten", "the hand-written pipeline (tests/handwritten.py), 3 epochs", kind="handwritten"
        ),
        Shape(
            "ddp",
            "2-rank DDP (gloo), the lab's correct run: 3000-row lab corpus, validation every 30 of 120 steps",
            kind="ddp",
        ),
        Shape(
            "copies",
            "faulty: validation = 200 train rows; OrderedTextClassifier (dropout 0.1), 1200 rows, "
            "vocabulary 2000, batch 32; no validator, no ledger",
            kind="copies",
            correct=False,
            demo_size=1200,
            batch_size=32,
            model="classifier",
            vocab_size=2000,
        ),
        Shape(
            "repeated",
            "faulty: the same, the 200 rows also trained on 4 times per epoch (duplicates on both sides)",
            kind="repeated",
            correct=False,
            demo_size=1200,
            batch_size=32,
            model="classifier",
            vocab_size=2000,
        ),
    )
}


# -- the runs ---------------------------------------------------------------------------------------
def _mean_model(pl: Any, torch: Any) -> type:
    class MeanOfEmbeddings(pl.LightningModule):
        """The issue's model: mean of the real tokens' embeddings, with the features, one linear layer."""

        def __init__(self, vocab_size: int, num_features: int, num_classes: int, lr: float, **_: Any) -> None:
            super().__init__()
            self.lr = lr
            self.embed = torch.nn.Embedding(vocab_size, 32, padding_idx=0)
            self.head = torch.nn.Linear(32 + num_features, num_classes)

        def forward(self, batch: dict) -> Any:
            mask = batch["attention_mask"].unsqueeze(-1).float()
            mean = (self.embed(batch["input_ids"]) * mask).sum(1) / mask.sum(1).clamp(min=1)
            return self.head(torch.cat([mean, batch["features"]], dim=-1))

        def training_step(self, batch: dict, batch_idx: int) -> Any:
            return torch.nn.functional.cross_entropy(self(batch), batch["labels"])

        def validation_step(self, batch: dict, batch_idx: int) -> None:
            self.log("val_loss", torch.nn.functional.cross_entropy(self(batch), batch["labels"]))

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=self.lr)

    return MeanOfEmbeddings


def _recorder(pl: Any) -> Any:
    class Losses(pl.Callback):
        """Every train loss, and how many there were at each validation (for the old statistic)."""

        def __init__(self) -> None:
            self.losses: list[float] = []
            self.at_validation: list[int] = []

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(float(loss))

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            if not trainer.sanity_checking:
                self.at_validation.append(len(self.losses))

    return Losses()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import logging

    loggers = [logging.getLogger(n) for n in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _fit(
    make_model: Callable[[], Any], data: Any, epochs: int, callbacks: list[Any], monitor: Any
) -> dict[str, Any]:
    """One fit with a recorder; what the monitor concluded and what it compared."""
    import pytorch_lightning as pl

    recorder = _recorder(pl)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        callbacks=[*callbacks, recorder],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    error = None
    with _quiet():
        try:
            trainer.fit(make_model(), data)
        except Exception as err:  # a validator that raises on a correct run is a finding too
            error = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return {
        "global_step": int(trainer.global_step),
        "error": error,
        "diagnoses": lab_extras.diagnoses(monitor),
        "facts": lab_extras.monitor_facts(monitor),
        "readings": lab_extras.monitor_readings(monitor),
        "losses": [round(v, 5) for v in recorder.losses],
        "at_validation": recorder.at_validation,
    }


def _text_runs(shape: Shape, runs: int, work: Path) -> list[dict[str, Any]]:
    import pytorch_lightning as pl
    import torch

    from lightning_order import OrderedDataModule, OrderValidator, SymptomMonitor
    from lightning_order.models import OrderedTextClassifier

    dm = OrderedDataModule(
        demo_size=shape.demo_size, batch_size=shape.batch_size, cache_dir=str(work / "cache")
    )
    dims = dm.dims  # prepares the data once; every run's fit only loads it
    data = dm
    if shape.kind in ("copies", "repeated"):
        data = lab_extras.leaky_validation(dm, repeats=3 if shape.kind == "repeated" else 0)
    mean = _mean_model(pl, torch)
    out = []
    for i in range(runs):
        torch.manual_seed(FIRST_SEED + i)

        def model() -> Any:
            if shape.model == "classifier":
                return OrderedTextClassifier(**dims, lr=shape.lr, dropout=shape.dropout)
            return mean(**dims, lr=shape.lr)

        monitor = SymptomMonitor(verbose=False)
        callbacks = [OrderValidator(), monitor] if shape.correct else [monitor]
        out.append(_fit(model, data, shape.epochs, callbacks, monitor))
    return out


def _handwritten_runs(shape: Shape, runs: int, repo: Path) -> list[dict[str, Any]]:
    import torch

    from lightning_order import OrderValidator, SymptomMonitor

    sys.path.insert(0, str(repo / "tests"))
    from handwritten import DocsClassifier, DocsData

    dm = DocsData()
    dm.setup("fit")
    out = []
    for i in range(runs):
        torch.manual_seed(FIRST_SEED + i)
        monitor = SymptomMonitor(unk_token_id=dm.vocab["[UNK]"], verbose=False)
        out.append(
            _fit(
                lambda: DocsClassifier(vocab_size=dm.vocab_size),
                dm,
                shape.epochs,
                [OrderValidator(), monitor],
                monitor,
            )
        )
    return out


def _ddp_runs(shape: Shape, runs: int, work: Path) -> list[dict[str, Any]]:
    import order_lab

    cfg = order_lab.LabConfig(
        seeds=[0], size=3000, max_steps=120, val_every=30, eval_every=10**6, controls=False
    )
    corpus = order_lab.build_lab_corpus(
        work / "ddp-corpus", cfg.size, 0, cfg.sources, cfg.test_fraction, cfg.label_noise
    )
    cache = str(work / "cache")
    order_lab.make_datamodule(cfg, corpus, 0, order_lab.RIGHT, cache).prepare_data()
    specs = [
        {
            "cfg": asdict(cfg),
            "corpus": corpus,
            "seed": 0,
            "init_seed": FIRST_SEED + i,
            "run": f"ddp-{i}",
            "order": list(order_lab.RIGHT),
            "devices": 2,
            "model_dims": None,
            "cache": cache,
        }
        for i in range(runs)
    ]
    out = []
    for result in order_lab._run_ddp(specs, work / "ddp"):
        diagnoses = [d for rank in result["rank_monitor_diagnoses"] for d in rank]
        out.append(
            {
                "global_step": result["global_step"],
                "error": result["error"] and result["error"]["type"],
                "diagnoses": diagnoses,
                "facts": result["monitor_facts"],
                "readings": result["monitor_readings"],
                "losses": result["losses"],
                "at_validation": list(range(cfg.val_every, cfg.max_steps + 1, cfg.val_every)),
            }
        )
    return out


def run_study(
    shapes: Sequence[str], runs: int, work: Path, repo: Path, log: Callable[..., Any] = print
) -> dict[str, Any]:
    """Runs ``runs`` initialisations of every shape named; the runs and their summary."""
    started = time.perf_counter()
    results: dict[str, Any] = {"runs_per_shape": runs, "first_seed": FIRST_SEED, "shapes": {}}
    for name in shapes:
        shape = SHAPES[name]
        t0 = time.perf_counter()
        if shape.kind == "handwritten":
            found = _handwritten_runs(shape, runs, repo)
        elif shape.kind == "ddp":
            found = _ddp_runs(shape, runs, work)
        else:
            found = _text_runs(shape, runs, work)
        for run in found:
            run["old_leakage"] = old_statistic(run["losses"], run["at_validation"], run["readings"]["val"])
        results["shapes"][name] = {
            "shape": asdict(shape),
            "runs": found,
            "summary": summarise_study(shape, found),
        }
        log(
            f"[false-alarms] {name:<12} {time.perf_counter() - t0:6.1f}s {results['shapes'][name]['summary']}",
            flush=True,
        )
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


# -- pure summaries -----------------------------------------------------------------------------------
def old_statistic(losses: Sequence[float], at_validation: Sequence[int], val: Sequence[float]) -> bool:
    """Whether the previous version's leakage test fired on these numbers: the mean of the last 10
    train losses before each validation against its loss, at or below it (no margin, no spread)."""
    from lightning_order.checks.symptoms import detect_train_val_gap

    near = [
        sum(losses[max(n - _OLD_NEAR, 0) : n]) / max(min(n, _OLD_NEAR), 1) for n in at_validation if n > 0
    ]
    found = detect_train_val_gap(near, list(val)[: len(near)], leak_margin=0.0, leak_z=0.0)
    return found is not None and found.evidence.get("kind") == "leakage"


def summarise_study(shape: Shape, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per shape: runs, runs with any symptom, runs naming an order error, the symptoms and rules seen."""
    leaks = [
        any(d["symptom"] == "train-val-gap" and d.get("kind") == "leakage" for d in r["diagnoses"])
        for r in runs
    ]
    return {
        "runs": len(runs),
        "errors": sum(bool(r["error"]) for r in runs),
        "any_symptom": sum(bool(r["diagnoses"]) for r in runs),
        "order_error_named": sum(any(d["suspected_rule"] for d in r["diagnoses"]) for r in runs),
        "symptoms": sorted({d["symptom"] for r in runs for d in r["diagnoses"]}),
        "rules": sorted({d["suspected_rule"] for r in runs for d in r["diagnoses"] if d["suspected_rule"]}),
        "leakage_new": sum(leaks),
        "leakage_old": sum(bool(r["old_leakage"]) for r in runs),
        "validations": sum(len(r["readings"]["val"]) for r in runs),
    }


def render_study(results: dict[str, Any], command: str) -> str:
    """The false-alarm table (correct shapes) and the curve-detection table (faulty shapes)."""
    shapes = results["shapes"]
    lines = [
        f"`{command}`: {results['runs_per_shape']} runs per shape, the model initialised with "
        f"`torch.manual_seed({results['first_seed']} + i)`; `OrderValidator()` and `SymptomMonitor()` "
        "at their defaults.",
        "",
        "| correct run | what varies | runs | runs with any symptom | runs naming an order error | symptoms | "
        "leakage by the previous statistic (last-10 mean, recomputed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in shapes.items():
        shape, s = entry["shape"], entry["summary"]
        if not shape["correct"]:
            continue
        errors = f" ({s['errors']} raised)" if s["errors"] else ""
        lines.append(
            f"| {name} | {shape['varies']} | {s['runs']}{errors} | {s['any_symptom']} | {s['order_error_named']} | "
            f"{', '.join(s['symptoms']) or '-'} | {s['leakage_old']} |"
        )
    faulty = [(n, e) for n, e in shapes.items() if not e["shape"]["correct"]]
    if faulty:
        lines += [
            "",
            "| faulty run (curves only) | what it is | runs | leakage reported (like with like) | "
            "leakage by the previous statistic | rule named |",
            "|---|---|---|---|---|---|",
        ]
        for name, entry in faulty:
            s = entry["summary"]
            lines.append(
                f"| {name} | {entry['shape']['varies']} | {s['runs']} | {s['leakage_new']} | {s['leakage_old']} | "
                f"{', '.join(s['rules']) or '-'} |"
            )
    return "\n".join(lines) + "\n"


def write_study(results: dict[str, Any], out: Path, command: str) -> str:
    """``false_alarms.json`` and ``false_alarms.md`` in ``out``; the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "false_alarms.json").write_text(json.dumps({**results, "command": command}, default=float))
    table = render_study(results, command)
    (out / "false_alarms.md").write_text(table)
    return table

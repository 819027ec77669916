"""The order-error lab: inject each order error into a real training run and measure what it costs.

For every order error of the problem description, the lab trains the reference model twice with
the same seed, data and step budget: once on data prepared in the mandated order, once on data
prepared in the faulty order (``OrderedDataModule(order=..., enforce=False)``: the steps really run
in that order). ``OrderValidator(on_violation="warn")`` and ``SymptomMonitor(on_symptom="warn")``
ride along, so the faulty run goes on and we record whether (and when) each one caught it.

Usage (from the repository root)::

    python benchmarks/order_lab.py                 # the full lab: 5 seeds, writes docs/lab/
    python benchmarks/order_lab.py --tiny --out /tmp/lab   # the test configuration (about a minute)

Outputs in ``--out``: ``results.json`` (every run, every number), ``table.md`` (claimed versus
measured, and detection) and ``loss_<error>.png`` (loss curves, correct versus faulty). With the
default ``--out`` the generated table in ``docs/order-error-lab.md`` is refreshed as well.

The lab corpus comes from the demo generator (:func:`lightning_order.data.text.demo.demo_rows`) with
the traits that make each error bite in scraped corpora: several sources with different numeric
scales concatenated in contiguous blocks (so contiguous shards differ), near-duplicates that only
differ in dirt, markup, entities and unicode variants. A test split is held out by a hash of the
cleaned text (near-duplicates stay on one side) and never reaches the datamodule: it is the
"truly unseen" data that validation metrics are compared with.

Structure: pure measurement functions (``unk_rate``, ``steps_to_target``, ``oscillation``, ...),
one function that performs a run (:func:`run_training`), a DDP worker mode for the sharding case
(Lightning's ``ddp`` strategy re-launches this script for rank 1), and a runner (:func:`run_lab`)
that aggregates seeds and writes the outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Runnable from a checkout without installing the package (python benchmarks/order_lab.py).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # lab_extras.py
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # launching.py: run_ranks

import lab_extras
import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from launching import run_ranks
from pytorch_lightning.callbacks import Callback

from lightning_order import RULES, OrderedDataModule, OrderValidator, OrderWarning
from lightning_order.callbacks.monitor.callback import SymptomMonitor
from lightning_order.checks.ledger import check_ledger
from lightning_order.data.engine.keys import is_val, key_hashes
from lightning_order.data.text.datamodule import DATA_STEPS
from lightning_order.data.text.demo import DEMO_NUM_CLASSES, DEMO_NUMERIC_COLUMNS, demo_rows
from lightning_order.data.text.encode import Encoder
from lightning_order.data.text.normalise import clean_text
from lightning_order.distributed import release_process_group
from lightning_order.models import OrderedTextClassifier

__all__ = [
    "CASES",
    "LabConfig",
    "build_lab_corpus",
    "dead_vocab_share",
    "evaluate",
    "main",
    "near_duplicate_key",
    "oscillation",
    "plot_curves",
    "render_tables",
    "run_lab",
    "run_training",
    "steps_to_target",
    "summarise",
    "target_loss",
    "unk_rate",
    "update_doc",
]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "lab"
#: The lab's page: its generated table is refreshed when the lab writes to DEFAULT_OUT.
DOC = REPO / "docs" / "order-error-lab.md"
RIGHT: tuple[str, ...] = DATA_STEPS


def _reorder(step: str, before: str) -> list[str]:
    """The mandated order with ``step`` moved just before ``before``."""
    order = [s for s in RIGHT if s != step]
    order.insert(order.index(before), step)
    return order


# -- the errors ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One order error of the lab.

    Attributes:
        name: the case's name: the rule code of the error, with a suffix for a second variant
            (also the name of its PNG).
        title: the error in words (the problem description's wording).
        order: the data order of the faulty run.
        expected_rules: the rule codes the validator should report (any of them counts).
        baseline: the correct run it is compared with (``"correct"`` or ``"correct-ddp"``).
        devices: CPU processes (2: DDP with gloo).
        model: ``"data"`` (built from ``dm.dims``), ``"requested"`` (built from the config's
            requested vocabulary size, before the vocabulary existed) or ``"other-config"`` (the
            dims of another data config: half the vocabulary).
        claimed_symptom, claimed_impact, claimed_difficulty: the problem description's claims.
        in_claims: whether the problem description's table names this error.
        features: ``""`` (the corpus as is) or ``"te-leak"`` (a target encoding fitted on train
            + validation rows; its baseline fits it on the train rows only: ``"te-train"``).
        in_ledger: whether the faulty step runs inside the pipeline, where the validator's ledger
            sees it (the target encoding is computed before the datamodule, as a column of the
            input file: no ledger records it).
    """

    name: str
    title: str
    order: tuple[str, ...]
    expected_rules: tuple[str, ...]
    baseline: str = "correct"
    devices: int = 1
    model: str = "data"
    claimed_symptom: str = ""
    claimed_impact: str = ""
    claimed_difficulty: str = ""
    in_claims: bool = True
    features: str = ""
    in_ledger: bool = True


#: The correct runs the cases are compared with: name -> (devices, features).
BASELINES: dict[str, tuple[int, str]] = {
    "correct": (1, ""),
    "correct-ddp": (2, ""),
    "correct-te": (1, "te-train"),
    "correct-te-ddp": (2, "te-train"),
}
#: Runs that must give no order-error diagnosis besides the correct baselines.
CONTROLS = ("random-labels", "boring-model", "handwritten")

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            "vocab-before-clean",
            "vocab built before cleaning",
            tuple(_reorder("build_vocab", "clean")),
            ("vocab-before-clean",),
            claimed_symptom="unknown tokens",
            claimed_impact="semantic drift",
            claimed_difficulty="2/5",
        ),
        Case(
            "shard-before-normalize",
            "data sharded before normalisation (each shard normalised with its own statistics)",
            tuple([s for s in RIGHT if s != "fit_features"] + ["fit_features"]),
            ("shard-before-normalize", "rank-mismatch"),
            baseline="correct-ddp",
            devices=2,
            claimed_symptom="loss fluctuates",
            claimed_impact="convergence about 30% slower",
            claimed_difficulty="3/5",
        ),
        Case(
            "init-before-data",
            "model initialised before the data's dims (built from the requested vocab_size)",
            RIGHT,
            ("init-before-data",),
            model="requested",
            claimed_symptom="dimension mismatch",
            claimed_impact="retraining needed",
            claimed_difficulty="1/5",
        ),
        Case(
            "init-before-data-stale",
            "model initialised before the data's dims (dims of another data config: half the vocab)",
            RIGHT,
            ("init-before-data",),
            model="other-config",
            claimed_symptom="dimension mismatch",
            claimed_impact="retraining needed",
            claimed_difficulty="1/5",
        ),
        Case(
            "fit-before-split",
            "validation split after (fitted) feature engineering",
            tuple(_reorder("fit_features", "split")),
            ("fit-before-split",),
            claimed_symptom="data leakage",
            claimed_impact="validation metrics inflated 5-15%",
            claimed_difficulty="4/5",
        ),
        Case(
            "split-before-clean",
            "validation split before cleaning (near-duplicates straddle the split; not in the claims)",
            tuple(_reorder("split", "clean")),
            ("train-val-overlap", "out-of-order"),
            in_claims=False,
        ),
        Case(
            "target-encoding",
            "label-aware fitted feature (target encoding of a categorical column) fitted on train + validation",
            RIGHT,
            ("fit-before-split",),
            baseline="correct-te",
            claimed_symptom="data leakage",
            claimed_impact="validation metrics inflated 5-15%",
            claimed_difficulty="4/5",
            features="te-leak",
            in_ledger=False,
        ),
        Case(
            "target-encoding-ddp",
            "the same target encoding leak, 2-rank DDP",
            RIGHT,
            ("fit-before-split",),
            baseline="correct-te-ddp",
            devices=2,
            claimed_symptom="data leakage",
            claimed_impact="validation metrics inflated 5-15%",
            claimed_difficulty="4/5",
            features="te-leak",
            in_ledger=False,
        ),
    )
}


# -- configuration --------------------------------------------------------------------------------
@dataclass
class LabConfig:
    """Everything that shapes a lab run (stored in ``results.json``)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    size: int = 10000
    test_fraction: float = 0.15
    val_fraction: float = 0.15
    sources: int = 3
    label_noise: float = 0.2
    vocab_size: int = 400
    requested_vocab_size: int = 2000
    max_length: int = 64
    batch_size: int = 32
    max_steps: int = 300
    eval_every: int = 10
    val_every: int = 50
    embed_dim: int = 32
    hidden_dim: int = 64
    lr: float = 3e-3
    target_fraction: float = 0.9
    cases: list[str] = field(default_factory=lambda: list(CASES))
    controls: bool = True
    tiny: bool = False

    @classmethod
    def tiny_config(cls) -> LabConfig:
        """The test configuration: a small corpus, few steps, one seed, still every error."""
        return cls(seeds=[0], size=900, max_steps=24, eval_every=6, val_every=8, vocab_size=200, tiny=True)


# -- the lab corpus ---------------------------------------------------------------------------------
def build_lab_corpus(
    folder: Path, size: int, seed: int, sources: int, test_fraction: float, label_noise: float = 0.0
) -> dict[str, Any]:
    """Writes the lab corpus: ``pool.jsonl`` (what the datamodule sees) and ``test.jsonl`` (held out).

    Rows come from the demo generator in its order (the sources stay in contiguous blocks). A row
    goes to the test split by a hash of its :func:`near_duplicate_key`, with a seed of its own,
    so a near-duplicate never sits on both sides and the test split is independent of the
    datamodule's validation split. With ``label_noise``, that share of the distinct keys gets a
    random label (the same for all its near-duplicates): without it the demo task is about 99%
    separable and no effect on accuracy can show.

    Returns:
        ``{"pool": path, "test": path, "pool_rows": n, "test_rows": m}``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rows = list(demo_rows(size, seed=seed, sources=sources))
    keys = [near_duplicate_key(r["text"]) for r in rows]
    flags = is_val(keys, test_fraction, seed + 7919)
    if label_noise > 0:
        # Annotation noise by cleaned text: near-duplicates keep sharing their (possibly wrong) label.
        noisy = is_val(keys, label_noise, seed + 104729) if label_noise < 1 else np.ones(len(keys), bool)
        for row, key, flip in zip(rows, keys, noisy):
            if flip:
                row["label"] = xxhash.xxh3_64_intdigest(key.encode(), seed=seed) % DEMO_NUM_CLASSES
    shops = lab_extras.num_shops(len(rows))
    for row, key in zip(rows, keys):  # a categorical column for the target-encoding case
        row["shop"] = lab_extras.shop_of(key, row["label"], seed, shops, DEMO_NUM_CLASSES)
    pool, test = folder / "pool.jsonl", folder / "test.jsonl"
    with pool.open("w") as pool_file, test.open("w") as test_file:
        for row, held_out in zip(rows, flags):
            (test_file if held_out else pool_file).write(json.dumps(row) + "\n")
    return {
        "pool": str(pool),
        "test": str(test),
        "pool_rows": int((~flags).sum()),
        "test_rows": int(flags.sum()),
    }


_WORD = re.compile(r"[^\W\d_]+")


def near_duplicate_key(text: str) -> str:
    """The words of the cleaned text, without punctuation: equal for a row and its near-duplicates.

    The demo's near-duplicates repeat a row's words with other dirt. Cleaning alone does not make
    them equal (an entity becomes ``&`` or ``"``, a run of ``!!!`` becomes ``!``), so the cleaned
    text would let a near-duplicate pair straddle the held-out split; the word sequence does not.
    """
    return " ".join(_WORD.findall(clean_text(text)))


def _read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def target_encoded_corpus(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, cache: str, mode: str
) -> dict[str, Any]:
    """The corpus with target-encoding columns, fitted on the train split (``te-train``) or on
    train + validation (``te-leak``); the held-out test rows are encoded with the same fit.

    The datamodule's split is read back from a correct preparation (its ``key_hash`` column), so
    "train" here is exactly the rows the model trains on.
    """
    dm = make_datamodule(cfg, corpus, seed, RIGHT, cache)
    dm.prepare_data()
    dm.setup("fit")
    train, val = dm.key_hashes("train"), dm.key_hashes("val")
    pool, test = _read_jsonl(corpus["pool"]), _read_jsonl(corpus["test"])
    hashes = key_hashes([clean_text(r["text"]) for r in pool], text=True)
    in_train = np.isin(hashes, train)
    covered = float(np.isin(hashes, np.concatenate([train, val])).mean())
    fitted = [r for r, t in zip(pool, in_train) if t or mode == "te-leak"]
    table, prior = lab_extras.target_encoding(
        [r["shop"] for r in fitted], [r["label"] for r in fitted], DEMO_NUM_CLASSES
    )
    folder = Path(corpus["pool"]).parent
    out = {
        **corpus,
        "pool": str(folder / f"pool-{mode}.jsonl"),
        "test": str(folder / f"test-{mode}.jsonl"),
        "numeric_columns": [*DEMO_NUMERIC_COLUMNS, *lab_extras.te_columns(DEMO_NUM_CLASSES)],
        "te_fitted_rows": len(fitted),
        "te_split_coverage": covered,
    }
    for rows, path in ((pool, out["pool"]), (test, out["test"])):
        Path(path).write_text(
            "".join(json.dumps(r) + "\n" for r in lab_extras.encode_rows(rows, table, prior))
        )
    return out


# -- pure measurements ----------------------------------------------------------------------------
def unk_rate(input_ids: np.ndarray, attention_mask: np.ndarray, unk_id: int | None) -> float:
    """The share of real (non-padding) tokens that are the unknown token."""
    real = np.asarray(attention_mask).astype(bool)
    if unk_id is None or not real.any():
        return 0.0
    return float(((np.asarray(input_ids) == unk_id) & real).sum() / real.sum())


def dead_vocab_share(input_ids: np.ndarray, attention_mask: np.ndarray, vocab_size: int) -> float:
    """The share of the vocabulary that never occurs in the given (cleaned, encoded) text."""
    used = np.unique(np.asarray(input_ids)[np.asarray(attention_mask).astype(bool)])
    return float(1.0 - used.size / vocab_size) if vocab_size else 0.0


def target_loss(correct_evals: Sequence[tuple[int, float]], initial: float, fraction: float) -> float:
    """The validation loss that marks ``fraction`` of the correct run's improvement.

    ``initial`` is the loss before training (``ln(num_classes)`` for a fresh classifier); the
    correct run's best validation loss is its end point.
    """
    best = min(loss for _, loss in correct_evals)
    return initial - fraction * (initial - best)


def steps_to_target(evals: Sequence[tuple[int, float]], target: float) -> int | None:
    """The first evaluated step whose validation loss is at or below ``target`` (``None``: never)."""
    return next((step for step, loss in evals if loss <= target), None)


def oscillation(losses: Sequence[float], start: int = 5, window: int = 100) -> float:
    """Relative step-to-step loss change: ``mean |loss[t+1] - loss[t]| / mean loss`` over a window.

    A smooth decline scores low; a loss that jumps up and down from batch to batch scores high.
    Batch noise sets a floor, so compare runs with the same batch size.
    """
    values = [float(v) for v in losses[start : start + window] if math.isfinite(float(v))]
    if len(values) < 3:
        return float("nan")
    deltas = [abs(b - a) for a, b in itertools.pairwise(values)]
    return statistics.fmean(deltas) / statistics.fmean(values)


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None, None
    return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else 0.0)


# -- one run ------------------------------------------------------------------------------------------
class _Recorder(Callback):
    """Per-step train losses, a validation loss curve every ``eval_every`` steps, and batch count."""

    def __init__(self, eval_every: int) -> None:
        self.eval_every = eval_every
        self.losses: list[float] = []
        self.evals: list[tuple[int, float, float]] = []
        self.batches_started = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.batches_started += 1

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss.detach()) if isinstance(loss, torch.Tensor) else float("nan"))
        if trainer.global_step % self.eval_every == 0:
            val_loss, val_acc = evaluate(pl_module, trainer.datamodule.val_dataloader())
            self.evals.append((int(trainer.global_step), val_loss, val_acc))


@torch.no_grad()
def evaluate(model: pl.LightningModule, batches: Any) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` over ``batches`` (dicts of the batch contract)."""
    was_training = model.training
    model.eval()
    total, loss_sum, correct = 0, 0.0, 0
    for batch in batches:
        batch = {k: v.to(model.device) for k, v in batch.items()}
        logits = model(batch)
        loss_sum += float(torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum"))
        correct += int((logits.argmax(-1) == batch["labels"]).sum())
        total += int(batch["labels"].numel())
    model.train(was_training)
    return loss_sum / max(total, 1), correct / max(total, 1)


def _test_batches(dm: OrderedDataModule, rows: list[dict[str, Any]], batch_size: int) -> Iterator[dict]:
    """The held-out rows, prepared with the pipeline's own cleaning, features, tokenizer and statistics."""
    batch: dict[str, list[Any]] = {k: [r[k] for r in rows] for k in rows[0]}
    if "clean" in dm.order:
        batch = dm.clean(batch)
        keep = [i for i, t in enumerate(batch["text"]) if t.strip()]
        batch = {k: [v[i] for i in keep] for k, v in batch.items()}
    if "engineer_features" in dm.order:
        batch = dm.engineer_features(batch)
    ledger = dm.ledger
    labels = {v: i for i, v in enumerate(ledger.info["label_names"])}
    keep = [i for i, label in enumerate(batch["label"]) if label in labels]
    batch = {k: [v[i] for i in keep] for k, v in batch.items()}
    encoder = Encoder(
        dm.tokenizer.to_str(), "text", "text", ledger.info["feature_names"], "label", labels, dm.max_length
    )
    encoded = encoder(batch)
    stats = dm.statistics
    features = (np.asarray(encoded["features"], dtype=np.float64) - np.asarray(stats["mean"])) / np.asarray(
        stats["std"]
    )
    tensors = {
        "input_ids": torch.as_tensor(encoded["input_ids"].astype(np.int64)),
        "attention_mask": torch.as_tensor(encoded["attention_mask"].astype(np.int64)),
        "features": torch.as_tensor(features, dtype=torch.float32),
        "labels": torch.as_tensor(encoded["labels"]),
    }
    for start in range(0, len(tensors["labels"]), batch_size):
        yield {k: v[start : start + batch_size] for k, v in tensors.items()}


@contextlib.contextmanager
def _capture_order_warnings(recorder: _Recorder) -> Iterator[list[dict[str, Any]]]:
    """Records every ``OrderWarning`` with the number of train batches started when it was issued."""
    caught: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always", OrderWarning)
        previous = warnings.showwarning

        def show(message: Any, category: type, filename: str, lineno: int, *args: Any) -> None:
            if issubclass(category, OrderWarning):
                caught.append({"text": str(message), "batches_started": recorder.batches_started})
            elif not issubclass(category, (UserWarning, DeprecationWarning)):
                previous(message, category, filename, lineno, *args)

        warnings.showwarning = show
        try:
            yield caught
        finally:
            warnings.showwarning = previous


_RULE_IN_TEXT = re.compile(r"\[([a-z][a-z-]+)\]")


def _rules_in(text: str) -> list[str]:
    return list(dict.fromkeys(r for r in _RULE_IN_TEXT.findall(text) if r in RULES))


def make_datamodule(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, order: Sequence[str], cache: str, **kw: Any
) -> OrderedDataModule:
    """The lab's ``OrderedDataModule`` for one seed and order (``enforce=False``: it runs as asked)."""
    options: dict[str, Any] = {
        "dataset": "json",
        "data_files": corpus["pool"],
        "numeric_columns": corpus.get("numeric_columns", DEMO_NUMERIC_COLUMNS),
        "val_fraction": cfg.val_fraction,
        "seed": seed,
        "vocab_size": cfg.vocab_size,
        "max_length": cfg.max_length,
        "batch_size": cfg.batch_size,
        "cache_dir": cache,
        "order": list(order),
        "enforce": False,
    }
    return OrderedDataModule(**{**options, **kw})


def run_training(spec: dict[str, Any]) -> dict[str, Any]:
    """Performs one run (correct or faulty) and returns what it measured (rank 0's view in DDP).

    Args:
        spec: ``{"cfg": asdict(LabConfig), "corpus": ..., "seed", "run", "order", "devices",
            "model_dims", "cache"}``, and optionally ``"init_seed"`` (the model's initialisation
            and the batch order; default ``seed``, which also drives the corpus and the split).

    Returns:
        Plain data: losses, the validation curve, final validation and test metrics, the rule
        codes the validator warned about (and how many batches had started by then), the
        monitor's diagnoses, the ledger's own verdict, and any exception the run ended with.
    """
    cfg = LabConfig(**spec["cfg"])
    seed, devices = int(spec["seed"]), int(spec["devices"])
    dm = make_datamodule(cfg, spec["corpus"], seed, spec["order"], spec["cache"])
    data_dims = dm.dims
    model_dims = {**data_dims, **(spec.get("model_dims") or {})}
    pl.seed_everything(int(spec.get("init_seed", seed)), workers=True, verbose=False)
    model = OrderedTextClassifier(
        **model_dims, embed_dim=cfg.embed_dim, hidden_dim=cfg.hidden_dim, lr=cfg.lr, dropout=0.1
    )
    recorder = _Recorder(cfg.eval_every)
    validator = OrderValidator(on_violation="warn")
    monitor = SymptomMonitor(on_symptom="warn", verbose=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=cfg.max_steps,
        # Lightning's own validation (what the monitor's train/validation check reads) every
        # val_every steps, across epoch boundaries.
        val_check_interval=cfg.val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        callbacks=[validator, monitor, recorder],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
    started = time.perf_counter()
    error = None
    with _capture_order_warnings(recorder) as caught:
        try:
            trainer.fit(model, dm)
        except Exception as err:  # a faulty run may crash: that is a measurement too
            error = {
                "type": type(err).__name__,
                "message": str(err).splitlines()[0][:300] if str(err) else "",
                "batches_started": recorder.batches_started,
                "global_step": int(trainer.global_step),
            }
    seconds = time.perf_counter() - started
    validator_warnings = [w for w in caught if not w["text"].startswith("SymptomMonitor")]
    rules = list(dict.fromkeys(r for w in validator_warnings for r in _rules_in(w["text"])))
    result: dict[str, Any] = {
        "run": spec["run"],
        "seed": seed,
        "rank": int(trainer.global_rank),
        "devices": devices,
        "order": list(spec["order"]),
        "data_dims": data_dims,
        "feature_names": list(dm.ledger.info.get("feature_names") or []),
        "model_dims": model_dims,
        "seconds": round(seconds, 2),
        "error": error,
        "global_step": int(trainer.global_step),
        "losses": [round(v, 5) for v in recorder.losses],
        "evals": [(step, round(loss, 5), round(acc, 5)) for step, loss, acc in recorder.evals],
        "validator_rules": rules,
        "validator_flagged_before_step_1": bool(validator_warnings)
        and all(w["batches_started"] == 0 for w in validator_warnings),
        "validator_first_warning": validator_warnings[0]["text"][:1500] if validator_warnings else None,
        "ledger_rules": list(dict.fromkeys(v.rule for v in check_ledger(dm.ledger))),
        "monitor_diagnoses": [
            {
                "symptom": d.symptom,
                "step": int(d.step),
                "suspected_rule": d.suspected_rule,
                "kind": d.evidence.get("kind") or d.evidence.get("trigger"),
                "message": d.message,
                "evidence": {
                    k: v for k, v in d.evidence.items() if isinstance(v, (int, float, str, type(None)))
                },
            }
            for d in monitor.diagnoses
        ],
        "monitor_input_shifts": [round(v, 4) if v is not None else None for v in monitor.input_shifts],
        "monitor_facts": lab_extras.monitor_facts(monitor),
        "monitor_readings": lab_extras.monitor_readings(monitor),
        "shard_info": dict(dm.shard_info),
        "statistics": {k: dm.statistics.get(k) for k in ("mean", "std")},
    }
    result.update(_data_measurements(dm, data_dims, _read_jsonl(spec["corpus"]["test"])))
    if error is None:
        val_loss, val_acc = evaluate(model, dm.val_dataloader())
        test_loss, test_acc = evaluate(model, _test_batches(dm, _read_jsonl(spec["corpus"]["test"]), 256))
        result.update(
            {"val_loss": val_loss, "val_acc": val_acc, "test_loss": test_loss, "test_acc": test_acc}
        )
        result.update(_overlap_accuracy(model, dm))
    return result


def _overlap_accuracy(model: pl.LightningModule, dm: OrderedDataModule) -> dict[str, Any]:
    """Validation accuracy on rows whose cleaned key is also in the train split, and on the others.

    A paired view of leakage: the same model on the same validation split, rows it may have
    memorised (their twin was trained on) against rows it cannot have seen.
    """
    import datasets

    train = datasets.load_from_disk(str(dm.cache_path / "train")).with_format("numpy", columns=["key_hash"])
    val = datasets.load_from_disk(str(dm.cache_path / "val")).with_format("numpy", columns=["key_hash"])
    overlap = np.isin(np.asarray(val[:]["key_hash"]), np.asarray(train[:]["key_hash"]))
    correct = np.concatenate([flags for flags in _correct_flags(model, dm.val_dataloader())])
    if correct.size != overlap.size or not overlap.any():
        return {"val_overlap_share": float(overlap.mean()) if overlap.size else 0.0}
    return {
        "val_overlap_share": float(overlap.mean()),
        "val_acc_overlapping": float(correct[overlap].mean()),
        "val_acc_unseen": float(correct[~overlap].mean()),
    }


@torch.no_grad()
def _correct_flags(model: pl.LightningModule, batches: Any) -> Iterator[np.ndarray]:
    was_training = model.training
    model.eval()
    for batch in batches:
        batch = {k: v.to(model.device) for k, v in batch.items()}
        yield (model(batch).argmax(-1) == batch["labels"]).cpu().numpy()
    model.train(was_training)


_SPECIALS = frozenset({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
_MARKUP = re.compile(r"[<>&;#]|^(nbsp|quot|amp|lt|gt|div|br)$")


def _data_measurements(
    dm: OrderedDataModule, dims: dict[str, int], test_rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the vocabulary does to cleaned text: unknown tokens, fragmentation, markup entries.

    The unknown-token rate is read on the encoded validation split (cleaned text, as the model
    sees it) and on the cleaned held-out test text (no truncation); fragmentation is tokens per
    whitespace word of that test text.
    """
    tokenizer = dm.tokenizer
    unk = tokenizer.token_to_id("[UNK]")
    val = dm._val if dm._val is not None else None
    out: dict[str, Any] = {}
    if val is not None:
        rows = val.with_format("numpy", columns=["input_ids", "attention_mask"])[:]
        ids, mask = np.asarray(rows["input_ids"]), np.asarray(rows["attention_mask"])
        out["val_unk_rate"] = unk_rate(ids, mask, unk)
        out["dead_vocab_share_val"] = dead_vocab_share(ids, mask, dims["vocab_size"])
    texts = [clean_text(r["text"]) for r in test_rows]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    tokens = sum(len(e.ids) for e in encodings)
    out["test_unk_rate"] = sum(e.ids.count(unk) for e in encodings) / max(tokens, 1)
    out["tokens_per_word"] = tokens / max(sum(len(t.split()) for t in texts), 1)
    vocab = tokenizer.get_vocab()
    pieces = [t.removeprefix("##") for t in vocab if t not in _SPECIALS]
    markup = [t for t in pieces if _MARKUP.search(t) or any(ord(c) > 127 for c in t)]
    upper = [t for t in pieces if any(c.isupper() for c in t)]
    out["vocab_markup_or_unicode_tokens"] = len(markup)
    out["vocab_uppercase_tokens"] = len(upper)
    return out


# -- DDP worker ---------------------------------------------------------------------------------------
def _worker(spec_path: Path) -> None:
    """Runs the DDP runs listed in ``spec_path`` one after the other, in the same two processes.

    Both ranks are started by :func:`_run_ddp`; later fits reuse both processes and the process
    group. Each rank writes ``<run>-rank<r>.json``.
    """
    torch.set_num_threads(1)
    batch = json.loads(spec_path.read_text())
    for spec in batch["specs"]:
        result = run_training(spec)
        Path(batch["out"], f"{spec['run']}-rank{result['rank']}.json").write_text(json.dumps(result))
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)


def _run_ddp(specs: list[dict[str, Any]], folder: Path, timeout: float = 1800) -> list[dict[str, Any]]:
    """Runs :func:`_worker` in fresh processes (2 CPU ranks, gloo); one merged result per spec."""
    folder.mkdir(parents=True, exist_ok=True)
    spec_path = folder / "specs.json"
    spec_path.write_text(json.dumps({"out": str(folder), "specs": specs}))
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    devices = max(int(spec["devices"]) for spec in specs)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)]
    # Both ranks at once, as torchrun starts them: the two imports run side by side.
    finished = run_ranks(command, devices, cwd=str(folder), timeout=timeout, PYTHONPATH=path)
    proc = next((p for p in finished if p.returncode), finished[0])
    merged = []
    for spec in specs:
        ranks = [folder / f"{spec['run']}-rank{r}.json" for r in range(int(spec["devices"]))]
        if proc.returncode != 0 or not all(p.exists() for p in ranks):
            raise RuntimeError(
                f"DDP run {spec['run']} (seed {spec['seed']}) failed with exit code {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        merged.append(_merge_ranks([json.loads(p.read_text()) for p in ranks]))
    return merged


def _merge_ranks(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's result, with every rank's curves and the validation numbers averaged over ranks.

    Every rank validates on the whole validation split with its own collate (its own statistics
    when they were fitted per shard), so the mean over ranks is what ``sync_dist`` would log.
    """
    first = dict(results[0])
    first["rank_losses"] = [r["losses"] for r in results]
    first["rank_evals"] = [r["evals"] for r in results]
    first["rank_statistics"] = [r["statistics"] for r in results]
    first["rank_val_loss"] = [r.get("val_loss") for r in results]
    first["rank_monitor_diagnoses"] = [r["monitor_diagnoses"] for r in results]
    first["evals"] = [
        (
            step,
            statistics.fmean(e[i][1] for e in first["rank_evals"]),
            statistics.fmean(e[i][2] for e in first["rank_evals"]),
        )
        for i, (step, _, _) in enumerate(first["evals"])
    ]
    if all(r.get("val_loss") is not None for r in results):
        for key in ("val_loss", "val_acc", "test_loss", "test_acc"):
            first[key] = statistics.fmean(r[key] for r in results)
    return first


# -- the runner ---------------------------------------------------------------------------------------
def _runs_for(cfg: LabConfig) -> list[tuple[str, Case | None]]:
    """The runs of one seed: the correct baselines the cases need, then the faulty runs."""
    cases = [CASES[name] for name in cfg.cases]
    baselines = list(dict.fromkeys(c.baseline for c in cases))
    return [(b, None) for b in baselines] + [(c.name, c) for c in cases]


def _control_runs(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, work: Path, cache: str, log: Any
) -> list:
    """The controls of one seed: random labels (correct order), BoringModel, the hand-written pipeline."""
    out = []
    random_corpus = build_lab_corpus(
        work / f"corpus-{seed}-random", cfg.size, seed, cfg.sources, cfg.test_fraction, 1.0
    )
    spec = {
        "cfg": asdict(cfg),
        "corpus": random_corpus,
        "seed": seed,
        "run": "random-labels",
        "order": list(RIGHT),
        "devices": 1,
        "model_dims": None,
        "cache": cache,
    }
    t0 = time.perf_counter()
    result = run_training(spec)
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    out.append(_log_run(result, "random-labels", log))
    for name, run in (
        ("boring-model", lambda: lab_extras.run_boring(seed)),
        ("handwritten", lambda: lab_extras.run_handwritten(seed, REPO)),
    ):
        t0 = time.perf_counter()
        result = {"seed": seed, "devices": 1, "error": None, "validator_rules": [], **run()}
        result["wall_seconds"] = round(time.perf_counter() - t0, 1)
        out.append(_log_run(result, name, log))
    return out


def run_lab(
    cfg: LabConfig, out: Path, work: Path, log: Any = print, command: str = "python benchmarks/order_lab.py"
) -> dict[str, Any]:
    """Runs every case for every seed and returns the results (also written to ``out``)."""
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    cache = str(work / "cache")
    for seed in cfg.seeds:
        corpus = build_lab_corpus(
            work / f"corpus-{seed}", cfg.size, seed, cfg.sources, cfg.test_fraction, cfg.label_noise
        )
        other_dims = None
        ddp: list[dict[str, Any]] = []
        corpora: dict[str, dict[str, Any]] = {"": corpus}
        for name, case in _runs_for(cfg):
            devices, features = (case.devices, case.features) if case else BASELINES[name]
            if features not in corpora:
                corpora[features] = target_encoded_corpus(cfg, corpus, seed, cache, features)
            order = case.order if case else RIGHT
            model_dims: dict[str, int] | None = None
            if case is not None and case.model == "requested":
                model_dims = {"vocab_size": cfg.requested_vocab_size}
            elif case is not None and case.model == "other-config":
                if other_dims is None:
                    other = make_datamodule(
                        cfg, corpus, seed, RIGHT, cache, vocab_size=max(cfg.vocab_size // 2, 50)
                    )
                    other_dims = other.dims
                model_dims = dict(other_dims)
            spec = {
                "cfg": asdict(cfg),
                "corpus": corpora[features],
                "seed": seed,
                "run": name,
                "order": list(order),
                "devices": devices,
                "model_dims": model_dims,
                "cache": cache,
            }
            # Prepare once in this process, so DDP ranks only read the cache.
            make_datamodule(cfg, corpora[features], seed, order, cache).prepare_data()
            if devices > 1:
                ddp.append(spec)  # run together below: one process launch per seed
                continue
            t0 = time.perf_counter()
            result = run_training(spec)
            result["wall_seconds"] = round(time.perf_counter() - t0, 1)
            runs.append(_log_run(result, name, log))
        if ddp:
            t0 = time.perf_counter()
            merged = _run_ddp(ddp, work / f"ddp-{seed}")
            for spec, result in zip(ddp, merged):
                result["wall_seconds"] = round((time.perf_counter() - t0) / len(ddp), 1)
                runs.append(_log_run(result, spec["run"], log))
        if cfg.controls:
            runs += _control_runs(cfg, corpus, seed, work, cache, log)
    summary = summarise(cfg, runs)
    results = {
        "controls": summarise_controls(runs),
        "command": command,
        "config": asdict(cfg),
        "seconds": round(time.perf_counter() - started, 1),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "summary": summary,
        "runs": runs,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, default=float))
    (out / "table.md").write_text(render_tables(results))
    plot_curves(results, out)
    if out.resolve() == DEFAULT_OUT.resolve():
        update_doc(DOC, render_tables(results))
    return results


def update_doc(doc: Path, table: str, marker: str = "lab-table") -> bool:
    """Replaces the generated table between the ``marker`` markers of ``doc``; ``False`` if it has none."""
    if not doc.exists():
        return False
    text = doc.read_text()
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{table}{end}{tail}")
    return True


def _log_run(result: dict[str, Any], name: str, log: Any) -> dict[str, Any]:
    result["case"] = name
    log(
        f"[lab] seed {result['seed']} {name:<24} {result['wall_seconds']:6.1f}s steps={result['global_step']:<4} "
        f"val_acc={_fmt(result.get('val_acc'))} test_acc={_fmt(result.get('test_acc'))} "
        f"validator={result['validator_rules']} monitor="
        f"{[(d['symptom'], d['suspected_rule'], d['step']) for d in result['monitor_diagnoses']]}"
        + (f" error={result['error']['type']}" if result["error"] else ""),
        flush=True,
    )
    return result


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summarise(cfg: LabConfig, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: faulty versus its correct baseline, over seeds (means and standard deviations)."""
    by = {(r["seed"], r["case"]): r for r in runs}
    out: dict[str, Any] = {}
    for name in cfg.cases:
        case = CASES[name]
        rows = []
        for seed in cfg.seeds:
            faulty, correct = by.get((seed, name)), by.get((seed, case.baseline))
            if faulty is None or correct is None:
                continue
            initial = math.log(correct["data_dims"]["num_classes"])
            curve = [(s, v) for s, v, _ in correct["evals"]]
            target = target_loss(curve, initial, cfg.target_fraction) if curve else None
            faulty_curve = [(s, v) for s, v, _ in faulty["evals"]]
            rows.append(
                {
                    "seed": seed,
                    "target_val_loss": target,
                    "steps_correct": steps_to_target(curve, target) if target is not None else None,
                    "steps_faulty": steps_to_target(faulty_curve, target) if target is not None else None,
                    "osc_correct": oscillation(correct["losses"]),
                    "osc_faulty": oscillation(faulty["losses"]),
                    "val_osc_correct": oscillation([v for _, v, _ in correct["evals"]], start=0),
                    "val_osc_faulty": oscillation([v for _, v, _ in faulty["evals"]], start=0),
                    "frag_correct": correct.get("tokens_per_word"),
                    "frag_faulty": faulty.get("tokens_per_word"),
                    "unk_correct": correct.get("val_unk_rate"),
                    "unk_faulty": faulty.get("val_unk_rate"),
                    "dead_vocab_correct": correct.get("dead_vocab_share_val"),
                    "dead_vocab_faulty": faulty.get("dead_vocab_share_val"),
                    "markup_vocab_correct": correct.get("vocab_markup_or_unicode_tokens"),
                    "markup_vocab_faulty": faulty.get("vocab_markup_or_unicode_tokens"),
                    "val_acc_correct": correct.get("val_acc"),
                    "val_acc_faulty": faulty.get("val_acc"),
                    "test_acc_correct": correct.get("test_acc"),
                    "test_acc_faulty": faulty.get("test_acc"),
                    "val_loss_correct": correct.get("val_loss"),
                    "val_loss_faulty": faulty.get("val_loss"),
                    "rank_val_loss_faulty": faulty.get("rank_val_loss"),
                    "overlap_share_faulty": faulty.get("val_overlap_share"),
                    "acc_overlapping_faulty": faulty.get("val_acc_overlapping"),
                    "acc_unseen_faulty": faulty.get("val_acc_unseen"),
                    "gap_correct": _gap(correct),
                    "gap_faulty": _gap(faulty),
                    "error": faulty["error"],
                    "validator_rules": faulty["validator_rules"],
                    "validator_expected_hit": bool(set(faulty["validator_rules"]) & set(case.expected_rules)),
                    "validator_before_step_1": faulty["validator_flagged_before_step_1"],
                    "monitor": [
                        (d["symptom"], d["step"], d["suspected_rule"]) for d in faulty["monitor_diagnoses"]
                    ],
                    "correct_validator_rules": correct["validator_rules"],
                    "correct_monitor": [d["symptom"] for d in correct["monitor_diagnoses"]],
                    **_monitor_verdict(faulty, case, cfg.max_steps),
                    "rel_inflation_correct": _rel_inflation(correct),
                    "rel_inflation_faulty": _rel_inflation(faulty),
                }
            )
        out[name] = {"case": asdict(case), "per_seed": rows, "aggregate": _aggregate(rows, cfg.max_steps)}
    return out


def _monitor_verdict(run: dict[str, Any], case: Case, max_steps: int) -> dict[str, Any]:
    """When the monitor first named the right order error, and what else it named."""
    right = [d["step"] for d in run["monitor_diagnoses"] if d["suspected_rule"] in case.expected_rules]
    wrong = sorted(
        {d["suspected_rule"] for d in run["monitor_diagnoses"] if d["suspected_rule"]}
        - set(case.expected_rules)
    )
    step = min(right) if right else None
    return {
        "monitor_right": bool(right),
        "monitor_right_step": step,
        "monitor_saved_pct": (100.0 * (1 - step / max_steps)) if step is not None else None,
        "monitor_wrong_rules": wrong,
    }


def _rel_inflation(run: dict[str, Any]) -> float | None:
    """Validation accuracy relative to held-out test accuracy, in percent above it."""
    if not run.get("val_acc") or not run.get("test_acc"):
        return None
    return 100.0 * (run["val_acc"] / run["test_acc"] - 1.0)


def summarise_controls(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per correct or control run kind: runs, runs with any diagnosis, runs naming an order error."""
    out: dict[str, Any] = {}
    for run in runs:
        if run["case"] not in BASELINES and run["case"] not in CONTROLS:
            continue
        entry = out.setdefault(
            run["case"], {"runs": 0, "diagnosed": 0, "order_error_named": 0, "symptoms": []}
        )
        entry["runs"] += 1
        entry["diagnosed"] += bool(run["monitor_diagnoses"])
        entry["order_error_named"] += any(d["suspected_rule"] for d in run["monitor_diagnoses"])
        entry["symptoms"] = sorted({*entry["symptoms"], *(d["symptom"] for d in run["monitor_diagnoses"])})
    return out


def _gap(run: dict[str, Any]) -> float | None:
    """Validation accuracy minus held-out test accuracy, in points."""
    if run.get("val_acc") is None or run.get("test_acc") is None:
        return None
    return 100.0 * (run["val_acc"] - run["test_acc"])


def _aggregate(rows: list[dict[str, Any]], max_steps: int) -> dict[str, Any]:
    agg: dict[str, Any] = {"seeds": len(rows)}
    for key in (
        "osc_correct",
        "osc_faulty",
        "val_osc_correct",
        "val_osc_faulty",
        "frag_correct",
        "frag_faulty",
        "unk_correct",
        "unk_faulty",
        "dead_vocab_correct",
        "dead_vocab_faulty",
        "markup_vocab_correct",
        "markup_vocab_faulty",
        "val_acc_correct",
        "val_acc_faulty",
        "test_acc_correct",
        "test_acc_faulty",
        "val_loss_correct",
        "val_loss_faulty",
        "gap_correct",
        "gap_faulty",
        "steps_correct",
        "overlap_share_faulty",
        "acc_overlapping_faulty",
        "acc_unseen_faulty",
    ):
        agg[key] = _mean_std([r[key] for r in rows])
    # Steps to target: a faulty run that never reached it counts as the budget (a lower bound).
    faulty_steps = [r["steps_faulty"] if r["steps_faulty"] is not None else max_steps for r in rows]
    agg["steps_faulty"] = _mean_std(faulty_steps)
    agg["faulty_never_reached"] = sum(r["steps_faulty"] is None for r in rows)
    slow = [(f / r["steps_correct"] - 1.0) * 100.0 for f, r in zip(faulty_steps, rows) if r["steps_correct"]]
    agg["slowdown_pct"] = _mean_std(slow)
    agg["inflation_pts"] = _mean_std(
        [
            r["gap_faulty"] - r["gap_correct"]
            for r in rows
            if r["gap_faulty"] is not None and r["gap_correct"] is not None
        ]
    )
    per_rank = [
        r["rank_val_loss_faulty"]
        for r in rows
        if r["rank_val_loss_faulty"] and None not in r["rank_val_loss_faulty"]
    ]
    agg["rank_val_loss_faulty"] = [_mean_std(values) for values in zip(*per_rank)] if per_rank else []
    agg["validator_hits"] = sum(r["validator_expected_hit"] and r["validator_before_step_1"] for r in rows)
    agg["monitor_hits"] = sum(bool(r["monitor"]) for r in rows)
    agg["monitor_right_hits"] = sum(r["monitor_right"] for r in rows)
    agg["monitor_right_step"] = _mean_std([r["monitor_right_step"] for r in rows])
    agg["monitor_saved_pct"] = _mean_std([r["monitor_saved_pct"] for r in rows])
    agg["monitor_wrong_rules"] = sorted({w for r in rows for w in r["monitor_wrong_rules"]})
    agg["rel_inflation_correct"] = _mean_std([r["rel_inflation_correct"] for r in rows])
    agg["rel_inflation_faulty"] = _mean_std([r["rel_inflation_faulty"] for r in rows])
    firsts = [min(d[1] for d in r["monitor"]) for r in rows if r["monitor"]]
    agg["monitor_first_step"] = _mean_std(firsts)
    agg["monitor_symptoms"] = sorted({d[0] for r in rows for d in r["monitor"]})
    agg["errors"] = sorted({r["error"]["type"] for r in rows if r["error"]})
    agg["false_alarms_correct"] = sum(
        bool(r["correct_validator_rules"] or r["correct_monitor"]) for r in rows
    )
    return agg


# -- rendering ----------------------------------------------------------------------------------------
def _pm(pair: tuple[float | None, float | None], fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    mean, std = pair
    if mean is None:
        return "-"
    text = fmt.format(mean * scale)
    return text + (f" ± {fmt.replace('+', '').format(std * scale)}" if std else "")


def _measured_impact(name: str, agg: dict[str, Any]) -> str:
    if name == "vocab-before-clean":
        return (
            f"steps to target val loss {_pm(agg['steps_faulty'], '{:.0f}')} vs {_pm(agg['steps_correct'], '{:.0f}')}; "
            f"final val loss {_pm(agg['val_loss_faulty'], '{:.3f}')} vs {_pm(agg['val_loss_correct'], '{:.3f}')}; "
            f"val acc {_pm(agg['val_acc_faulty'], scale=100)} vs {_pm(agg['val_acc_correct'], scale=100)} %; "
            f"test acc {_pm(agg['test_acc_faulty'], scale=100)} vs {_pm(agg['test_acc_correct'], scale=100)} %; "
            f"markup/unicode vocab entries {_pm(agg['markup_vocab_faulty'], '{:.0f}')} vs "
            f"{_pm(agg['markup_vocab_correct'], '{:.0f}')}; tokens per clean word "
            f"{_pm(agg['frag_faulty'], '{:.2f}')} vs {_pm(agg['frag_correct'], '{:.2f}')}"
        )
    if name == "shard-before-normalize":
        never = (
            f" ({agg['faulty_never_reached']} of {agg['seeds']} faulty runs never reached it and count as "
            "the step budget: a lower bound)"
            if agg["faulty_never_reached"]
            else ""
        )
        return (
            f"steps to target val loss {_pm(agg['steps_faulty'], '{:.0f}')} vs "
            f"{_pm(agg['steps_correct'], '{:.0f}')} ({_pm(agg['slowdown_pct'], '{:+.0f}')} %){never}; "
            f"final val loss {_pm(agg['val_loss_faulty'], '{:.3f}')} vs {_pm(agg['val_loss_correct'], '{:.3f}')}"
            + (
                " (faulty, by the statistics of rank "
                + ", ".join(
                    f"{i}: {_pm(tuple(v), '{:.3f}')}" for i, v in enumerate(agg["rank_val_loss_faulty"])
                )
                + ")"
                if agg["rank_val_loss_faulty"]
                else ""
            )
        )
    if name.startswith("init-before-data"):
        if agg["errors"]:
            return f"crashed at the first batch ({', '.join(agg['errors'])}) in {agg['seeds']}/{agg['seeds']} seeds"
        return (
            f"trained without error; val acc {_pm(agg['val_acc_faulty'], scale=100)} vs "
            f"{_pm(agg['val_acc_correct'], scale=100)} %, test acc {_pm(agg['test_acc_faulty'], scale=100)} vs "
            f"{_pm(agg['test_acc_correct'], scale=100)} %"
        )
    overlap = ""
    if agg["acc_overlapping_faulty"][0] is not None:
        overlap = (
            f"; faulty val acc on the {_pm(agg['overlap_share_faulty'], scale=100)} % of validation rows whose "
            f"cleaned text is also in train {_pm(agg['acc_overlapping_faulty'], scale=100)} %, on the others "
            f"{_pm(agg['acc_unseen_faulty'], scale=100)} %"
        )
    relative = ""
    if name.startswith("target-encoding"):
        relative = (
            f"validation accuracy above held-out test accuracy by {_pm(agg['rel_inflation_faulty'], '{:+.1f}')} % "
            f"(relative; correct: {_pm(agg['rel_inflation_correct'], '{:+.1f}')} %; claimed 5-15 %); "
        )
    return relative + (
        f"val - test acc {_pm(agg['gap_faulty'])} vs {_pm(agg['gap_correct'])} pts "
        f"(inflation {_pm(agg['inflation_pts'], '{:+.1f}')} pts); val acc "
        f"{_pm(agg['val_acc_faulty'], scale=100)} vs {_pm(agg['val_acc_correct'], scale=100)} %{overlap}"
    )


def _measured_symptom(name: str, agg: dict[str, Any]) -> str:
    if name == "vocab-before-clean":
        return (
            f"UNK rate on clean val text {_pm(agg['unk_faulty'], '{:.2f}', 100)} % vs "
            f"{_pm(agg['unk_correct'], '{:.2f}', 100)} %"
        )
    if name == "shard-before-normalize":
        return (
            f"train loss oscillation {_pm(agg['osc_faulty'], '{:.3f}')} vs {_pm(agg['osc_correct'], '{:.3f}')}; "
            f"val loss oscillation {_pm(agg['val_osc_faulty'], '{:.3f}')} vs {_pm(agg['val_osc_correct'], '{:.3f}')}"
        )
    if name.startswith("init-before-data"):
        return ", ".join(agg["errors"]) if agg["errors"] else "none (larger embedding table, unused rows)"
    return f"val acc − test acc {_pm(agg['gap_faulty'])} pts (correct: {_pm(agg['gap_correct'])})"


def render_tables(results: dict[str, Any]) -> str:
    """``table.md``: claimed versus measured, then detection (faulty runs and correct runs)."""
    summary, cfg = results["summary"], results["config"]
    seeds = len(cfg["seeds"])
    lines = [
        f"Measured over {seeds} seed(s), {cfg['max_steps']} steps per run, corpus of {cfg['size']} rows "
        f"({cfg['sources']} sources); faulty vs correct, mean ± std over seeds.",
        "",
        "| order error | claimed symptom | measured symptom (faulty vs correct) | claimed impact | measured impact "
        "(faulty vs correct) | claimed difficulty |",
        "|---|---|---|---|---|---|",
    ]
    for name, entry in summary.items():
        case, agg = entry["case"], entry["aggregate"]
        claimed = [case["claimed_symptom"], case["claimed_impact"], case["claimed_difficulty"]]
        if not case["in_claims"]:
            claimed = ["(not claimed)"] * 3
        lines.append(
            f"| {case['title']} | {claimed[0]} | {_measured_symptom(name, agg)} | {claimed[1]} | "
            f"{_measured_impact(name, agg)} | {claimed[2]} |"
        )
    lines += [
        "",
        "| order error | expected rule | validator: rules warned (seed 0) | flagged before step 1 | "
        "monitor: right error named | first right diagnosis (step) | step budget saved | "
        "monitor named otherwise | correct runs flagged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in summary.items():
        case, agg, rows = entry["case"], entry["aggregate"], entry["per_seed"]
        first = rows[0]["validator_rules"] if rows else []
        symptoms = f" ({', '.join(agg['monitor_symptoms'])})" if agg["monitor_right_hits"] else ""
        lines.append(
            f"| {name} | {' or '.join(case['expected_rules'])} | {', '.join(first) or 'none'} | "
            f"{agg['validator_hits']}/{agg['seeds']} | {agg['monitor_right_hits']}/{agg['seeds']}{symptoms} | "
            f"{_pm(agg['monitor_right_step'], '{:.0f}')} | {_pm(agg['monitor_saved_pct'], '{:.0f}')} % | "
            f"{', '.join(agg['monitor_wrong_rules']) or 'nothing'} | {agg['false_alarms_correct']}/{agg['seeds']} |"
        )
    controls = results.get("controls") or {}
    if controls:
        lines += [
            "",
            "| correct or control run | runs | runs with any diagnosis | runs naming an order error | symptoms |",
            "|---|---|---|---|---|",
        ]
        for name, entry in controls.items():
            lines.append(
                f"| {name} | {entry['runs']} | {entry['diagnosed']} | {entry['order_error_named']} | "
                f"{', '.join(entry['symptoms']) or '-'} |"
            )
    return "\n".join(lines) + "\n"


def plot_curves(results: dict[str, Any], out: Path) -> list[Path]:
    """``loss_<error>.png``: train loss (smoothed) and validation loss, correct vs faulty, seed 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    seed = results["config"]["seeds"][0]
    by = {(r["seed"], r["case"]): r for r in results["runs"]}
    for name, entry in results["summary"].items():
        faulty, correct = by.get((seed, name)), by.get((seed, entry["case"]["baseline"]))
        if faulty is None or correct is None:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), dpi=72)
        for run, label, colour, style in (
            (correct, "correct", "#1f77b4", "-"),
            (faulty, "faulty", "#d62728", "--"),
        ):
            losses = np.asarray(run["losses"], dtype=float)
            if losses.size:
                left.plot(np.arange(1, losses.size + 1), losses, color=colour, alpha=0.15, lw=0.6)
                k = min(10, losses.size)
                smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
                left.plot(np.arange(k, losses.size + 1), smooth, color=colour, ls=style, lw=1.5, label=label)
            if run is faulty and len(run.get("rank_evals") or []) > 1:
                for rank, evals in enumerate(run["rank_evals"]):
                    steps, vals = zip(*[(s, v) for s, v, _ in evals])
                    right.plot(
                        steps, vals, color=colour, lw=0.7, alpha=0.5, ls=":", label=f"faulty, rank {rank}"
                    )
            if run["evals"]:
                steps, vals = zip(*[(s, v) for s, v, _ in run["evals"]])
                right.plot(steps, vals, color=colour, ls=style, marker=".", lw=1.2, label=label)
        if faulty.get("error"):
            left.text(
                0.5,
                0.5,
                f"faulty run crashed:\n{faulty['error']['type']}",
                transform=left.transAxes,
                ha="center",
                color="#d62728",
            )
        left.set_title("train loss (rank 0; 10-step mean)", fontsize=9)
        right.set_title(
            "validation loss (mean over ranks)" if faulty["devices"] > 1 else "validation loss", fontsize=9
        )
        for ax in (left, right):
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=7)
        fig.suptitle(f"{name} (seed {seed})", fontsize=10)
        fig.tight_layout()
        path = out / f"loss_{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


# -- command line -------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Runs the lab (or, with ``--worker``, one DDP rank). Returns the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="corpus, split and training seeds (default: 0 1 2 3 4)"
    )
    parser.add_argument(
        "--size", type=int, help="rows of the lab corpus, test split included (default 10000)"
    )
    parser.add_argument("--max-steps", type=int, help="optimizer steps per run (default 300)")
    parser.add_argument(
        "--cases", nargs="+", choices=list(CASES), help="the order errors to run (default: all)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default docs/lab/)")
    parser.add_argument("--work", type=Path, help="keep corpora and caches here (default: a temp folder)")
    parser.add_argument("--label-noise", type=float, help="share of texts with a random label (default 0.2)")
    parser.add_argument(
        "--no-controls", action="store_true", help="skip random labels, BoringModel, hand-written"
    )
    parser.add_argument("--tiny", action="store_true", help="the test configuration (small, fast, 1 seed)")
    parser.add_argument(
        "--false-alarms",
        type=int,
        metavar="RUNS",
        help="run the false-alarm study instead: RUNS initialisations of every shape of correct run "
        "(and of the two faulty curve shapes)",
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        help="the false-alarm study's shapes (default: all; see lab_false_alarms.SHAPES)",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # One thread per process: on a shared (or small) CPU, torch's thread pool spins against other
    # processes and a step takes ten times longer; the lab's model is too small to gain from threads.
    torch.set_num_threads(1)
    if args.worker is not None:
        _worker(args.worker)
        return None
    if args.false_alarms is not None:
        return _false_alarms(args, argv)
    cfg = LabConfig.tiny_config() if args.tiny else LabConfig()
    if args.seeds:
        cfg.seeds = list(args.seeds)
    if args.size:
        cfg.size = args.size
    if args.max_steps:
        cfg.max_steps = args.max_steps
    if args.label_noise is not None:
        cfg.label_noise = args.label_noise
    if args.cases:
        cfg.cases = list(args.cases)
    if args.no_controls:
        cfg.controls = False
    work = args.work or Path(tempfile.mkdtemp(prefix="order_lab_"))
    try:
        command = " ".join(["python benchmarks/order_lab.py", *(argv if argv is not None else sys.argv[1:])])
        results = run_lab(cfg, args.out, work, command=command)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(render_tables(results))
    print(f"[lab] {results['seconds']:.0f}s; wrote {args.out}/results.json, table.md, loss_*.png")
    return results


def _false_alarms(args: argparse.Namespace, argv: Sequence[str] | None) -> dict[str, Any]:
    """``--false-alarms RUNS``: the study of :mod:`lab_false_alarms`, its table in ``--out`` (and
    in the lab's page when ``--out`` is the default)."""
    import lab_false_alarms

    shapes = args.shapes or list(lab_false_alarms.SHAPES)
    unknown = sorted(set(shapes) - set(lab_false_alarms.SHAPES))
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; expected some of {', '.join(lab_false_alarms.SHAPES)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="order_lab_fa_"))
    command = " ".join(["python benchmarks/order_lab.py", *(argv if argv is not None else sys.argv[1:])])
    try:
        results = lab_false_alarms.run_study(shapes, args.false_alarms, work, REPO)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    table = lab_false_alarms.write_study(results, args.out, command)
    if args.out.resolve() == DEFAULT_OUT.resolve():
        update_doc(DOC, table, marker="false-alarm-table")
    print(table)
    print(f"[false-alarms] {results['seconds']:.0f}s; wrote {args.out}/false_alarms.json, false_alarms.md")
    return results


if __name__ == "__main__":
    main()

"""SymptomMonitor on real, short training runs: each symptom from a run that has its cause, and
no diagnosis from correct runs; the losses it reads, in step order.

Without a Trainer: tests/unit/callbacks/; under DDP: tests/distributed/test_symptom_monitor_ddp.py.
"""

from __future__ import annotations

import csv
import time
import warnings
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import yaml
from helpers import ROOT, quiet_trainer
from orders import WRONG_ORDERS
from pytorch_lightning.loggers import CSVLogger
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from lightning_order.callbacks.monitor.callback import SymptomMonitor
from lightning_order.errors import OrderWarning
from lightning_order.ledger import CHECKPOINT_KEY as PAUSE_KEY

VOCAB_BEFORE_CLEAN = WRONG_ORDERS["vocab-before-clean"]
WORDS = [f"w{i}" for i in range(40)]


_trainer = quiet_trainer  # tmp_path, callbacks, then any Trainer keyword


# -- a small text task whose loader tokenises inside __getitem__ ------------------------------
def _texts(n: int = 640) -> tuple[list[str], list[int]]:
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (n,), generator=g).tolist()
    texts = []
    for label in labels:
        ids = torch.randint(0, 20, (12,), generator=g) + 20 * label
        texts.append(" ".join(WORDS[int(i)] for i in ids))
    return texts, labels


def _tokenizer(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    return tokenizer


class TokenisingDataset(Dataset):
    """The wrong place for preprocessing: every __getitem__ tokenises (plus slow Python work)."""

    def __init__(self, texts: list[str], labels: list[int], tokenizer: Tokenizer, delay_s: float) -> None:
        self.texts, self.labels, self.tokenizer, self.delay_s = texts, labels, tokenizer, delay_s

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.tokenizer.encode(self.texts[index]).ids[:16]
        time.sleep(self.delay_s)  # stands for the cleaning and feature maths done per row here
        ids = ids + [0] * (16 - len(ids))
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(self.labels[index])}


class PreparedDataset(Dataset):
    """The right place: tokenised once, before training."""

    def __init__(self, source: TokenisingDataset) -> None:
        # The same rows, made without the per-row delay: what is timed is the loop, not this set-up.
        fast = TokenisingDataset(source.texts, source.labels, source.tokenizer, delay_s=0.0)
        self.rows = [fast[i] for i in range(len(fast))]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.rows[index]


class BagOfWords(pl.LightningModule):
    def __init__(self, vocab_size: int = 64, dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, 16, padding_idx=0)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self.head(self.embedding(batch["input_ids"])), batch["labels"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self.head(self.embedding(batch["input_ids"])), batch["labels"])
        self.log("val_loss", loss)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


#: Seconds of per-row work in ``__getitem__``: 16 rows a batch wait 48 ms, over twice the monitor's
#: 20 ms floor (``min_wait_s``) and many times a BagOfWords step, so the loop starves at any load.
DELAY_S = 0.003


@pytest.fixture(scope="module")
def tokenising_data() -> TokenisingDataset:
    texts, labels = _texts()
    return TokenisingDataset(texts, labels, _tokenizer(texts), delay_s=DELAY_S)


def _starvation(monitor: SymptomMonitor) -> list:
    return [d for d in monitor.diagnoses if d.symptom == "data-starvation"]


def test_tokenising_in_getitem_starves_the_loop(tmp_path: Path, tokenising_data: TokenisingDataset) -> None:
    monitor = SymptomMonitor()
    loader = DataLoader(tokenising_data, batch_size=16, shuffle=True)
    with pytest.warns(OrderWarning, match="data-starvation"):
        _trainer(tmp_path, [monitor], max_steps=40).fit(BagOfWords(), loader)
    (diagnosis,) = _starvation(monitor)
    assert diagnosis.evidence["wait_share"] > 0.5
    assert diagnosis.evidence["median_wait_s"] >= 16 * DELAY_S
    # A loader problem: reported as such, never as an order error (issue 12).
    assert diagnosis.suspected_rule is None and "loader problem" in diagnosis.describe()
    assert "data-starvation" in monitor.report() and "0 attributed to an order error" in monitor.report()


def test_prepared_data_does_not_starve(tmp_path: Path, tokenising_data: TokenisingDataset) -> None:
    monitor = SymptomMonitor()
    loader = DataLoader(PreparedDataset(tokenising_data), batch_size=16, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        _trainer(tmp_path, [monitor], max_steps=40).fit(BagOfWords(), loader)
    assert monitor.diagnoses == []
    assert monitor.report().startswith("SymptomMonitor: no symptom")


def test_metrics_go_to_the_logger(tmp_path: Path, tokenising_data: TokenisingDataset) -> None:
    monitor = SymptomMonitor(check_every_n_steps=5)
    logger = CSVLogger(str(tmp_path), name="run")
    loader = DataLoader(tokenising_data, batch_size=16)
    with pytest.warns(OrderWarning):
        _trainer(tmp_path, [monitor], max_steps=30, logger=logger).fit(BagOfWords(), loader)
    rows = list(csv.DictReader(open(Path(logger.log_dir) / "metrics.csv")))
    shares = [float(r["symptom/wait_share"]) for r in rows if r.get("symptom/wait_share")]
    assert shares and max(shares) > 0.5
    assert any(r.get("symptom/diagnoses") == "1.0" for r in rows)


def test_stop_pauses_with_a_checkpoint_and_state_round_trips(
    tmp_path: Path, tokenising_data: TokenisingDataset
) -> None:
    monitor = SymptomMonitor(on_symptom="stop", gpu_hour_price=2.5)
    loader = DataLoader(tokenising_data, batch_size=16)
    trainer = _trainer(tmp_path, [monitor], max_steps=200)
    with pytest.warns(OrderWarning):
        trainer.fit(BagOfWords(), loader)
    assert monitor.pause_path is not None
    assert trainer.global_step < 200  # stopped: the first check after 20 steps diagnosed it
    checkpoint = torch.load(monitor.pause_path, weights_only=False)
    assert checkpoint["global_step"] == trainer.global_step
    assert checkpoint["optimizer_states"] and checkpoint["state_dict"]
    payload = checkpoint[PAUSE_KEY]
    assert [r["symptom"] for r in payload["reason"]] == ["data-starvation"]
    waste = payload["waste"]
    assert waste["step"] == trainer.global_step and waste["num_devices"] == 1
    assert waste["device_hours"] > 0 and waste["cost"] == pytest.approx(waste["device_hours"] * 2.5)
    assert waste["progress"] == pytest.approx(trainer.global_step / 200)
    # The callback's own state travels in the same checkpoint and loads back.
    state = checkpoint["callbacks"][monitor.state_key]
    again = SymptomMonitor(on_symptom="stop", gpu_hour_price=2.5)
    assert again.state_key == monitor.state_key
    again.load_state_dict(state)
    assert again.diagnoses == monitor.diagnoses
    assert again.pause_path == monitor.pause_path
    assert again.elapsed_s >= state["elapsed_s"] > 0
    again.load_state_dict({})  # an older, empty state loads with defaults
    assert again.diagnoses == []


def test_resuming_keeps_diagnoses_and_does_not_repeat_them(
    tmp_path: Path, tokenising_data: TokenisingDataset
) -> None:
    first = SymptomMonitor(on_symptom="stop")
    loader = DataLoader(tokenising_data, batch_size=16)
    with pytest.warns(OrderWarning):
        _trainer(tmp_path, [first], max_steps=100).fit(BagOfWords(), loader)
    second = SymptomMonitor(on_symptom="stop")
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        _trainer(tmp_path, [second], max_steps=first_step(first) + 25).fit(
            BagOfWords(), loader, ckpt_path=first.pause_path
        )
    assert [d.symptom for d in second.diagnoses] == ["data-starvation"]  # restored, not repeated


def first_step(monitor: SymptomMonitor) -> int:
    return monitor.diagnoses[0].step


# -- OrderedDataModule runs: vocabulary before cleaning, a leaky split, correct demo runs --------
@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


def _datamodule(cache_dir: str, seed: int = 0, order: list[str] | None = None, **kwargs):
    from lightning_order.data.text.datamodule import OrderedDataModule

    options = dict(demo_size=2000, vocab_size=2000, seed=seed, cache_dir=cache_dir)
    options.update(kwargs)
    return OrderedDataModule(order=order, enforce=order is None, **options)


def _model(dm):
    from lightning_order.models import OrderedTextClassifier

    return OrderedTextClassifier(**dm.dims)


@pytest.mark.slow
def test_vocab_built_before_cleaning_shows_unknown_tokens(tmp_path: Path, cache_dir: str) -> None:
    pl.seed_everything(0)
    dm = _datamodule(cache_dir, order=VOCAB_BEFORE_CLEAN)
    monitor = SymptomMonitor()
    with pytest.warns(OrderWarning, match="plateau"):
        _trainer(tmp_path, [monitor], max_steps=40, limit_val_batches=0).fit(_model(dm), dm)
    (diagnosis,) = monitor.diagnoses
    assert diagnosis.symptom == "plateau" and diagnosis.suspected_rule == "vocab-before-clean"
    assert diagnosis.evidence["trigger"] == "unk-rate"
    assert diagnosis.evidence["unk_rate"] > 0.002


class LeakyData(pl.LightningDataModule):
    """A leaky split: the validation rows are ``rows`` train rows, trained on ``1 + repeats`` times per
    epoch (duplicates on both sides of a split); held in memory, no ledger."""

    def __init__(self, dm, rows: int = 200, repeats: int = 3) -> None:
        super().__init__()
        self.dm, self.rows, self.repeats = dm, rows, repeats
        self.tokenizer = dm.tokenizer

    def setup(self, stage: str) -> None:
        self.dm.trainer = self.trainer
        self.dm.setup(stage)
        train = self.dm.train_dataloader()
        self.items = [train.dataset[i] for i in range(len(train.dataset))]
        self.collate, self.batch_size = train.collate_fn, train.batch_size

    def train_dataloader(self) -> DataLoader:
        items = self.items + self.items[: self.rows] * self.repeats
        return DataLoader(items, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.items[: self.rows], batch_size=64, collate_fn=self.collate)


@pytest.mark.slow
@pytest.mark.parametrize("leaky", [True, False])
def test_leaky_split_shows_train_val_gap(tmp_path: Path, cache_dir: str, leaky: bool) -> None:
    # Compared like with like (the train loss at each validation's step), validation rows that were
    # also trained on, and more often than the average train row, are easier than the train rows;
    # rows trained on once score like them, which the curves cannot tell from a model that
    # generalises (the lab's false-alarm study measures both).
    pl.seed_everything(0)
    dm = _datamodule(cache_dir, demo_size=1200)
    data = LeakyData(dm) if leaky else dm
    monitor = SymptomMonitor(symptoms=["train-val-gap"])
    _trainer(tmp_path, [monitor], max_epochs=3).fit(_model(dm), data)
    readings = monitor.readings
    print(f"\n[train-val-gap leaky={leaky}] train {readings.epoch_train} val {readings.epoch_val}")
    codes = [d.symptom for d in monitor.diagnoses]
    assert codes == (["train-val-gap"] if leaky else []), readings.epoch_train + readings.epoch_val
    if leaky:
        (diagnosis,) = monitor.diagnoses
        assert diagnosis.evidence["kind"] == "leakage" and diagnosis.evidence["z"] > 2
        assert diagnosis.suspected_rule == "train-val-overlap"  # no validator, no ledger: the listed rule


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_demo_runs_give_no_diagnosis(tmp_path: Path, cache_dir: str, seed: int) -> None:
    # configs/demo.yaml, at a tenth of its corpus and two of its four epochs (CPU budget).
    config = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    data_args = {k: v for k, v in config["data"].items() if k not in ("dataset", "cache_dir", "num_proc")}
    data_args["demo_size"] = data_args["demo_size"] // 10
    model_args = config["model"]["init_args"]
    pl.seed_everything(seed)
    dm = _datamodule(cache_dir, seed=seed, **data_args)
    from lightning_order.models import OrderedTextClassifier

    monitor = SymptomMonitor()
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderWarning)
        _trainer(tmp_path, [monitor], max_epochs=2).fit(OrderedTextClassifier(**dm.dims, **model_args), dm)
    assert monitor.diagnoses == []


# -- DDP: per-rank statistics ----------------------------------------------------------------


class _Recorder(pl.LightningModule):
    """Records its own losses; ``manual`` returns a loss that still requires grad."""

    def __init__(self, manual: bool) -> None:
        super().__init__()
        self.automatic_optimization = not manual
        self.net = nn.Linear(4, 2)
        self.losses: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(loss.item())
        if not self.automatic_optimization:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_monitor_reads_every_step_loss_in_order(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    for manual in (False, True):
        model, monitor = _Recorder(manual), SymptomMonitor(check_every_n_steps=7, verbose=False)
        quiet_trainer(tmp_path, [monitor], max_steps=30).fit(model, data)
        # 30 steps: four checks of 7 and the end-of-training one for the last 2.
        assert len(model.losses) == 30
        assert list(monitor.readings.recent) == model.losses[-len(monitor.readings.recent) :]
        assert monitor.readings.start == model.losses[: len(monitor.readings.start)]
        assert not monitor.readings.pending

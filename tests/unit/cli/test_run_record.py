"""What a run records for its summary (lightning_order/cli/run_record.py): tokens per batch, the
loss curve and the throughput of a real fit, and the summary lines.

The summary of a ``lightning-order fit`` (LM and classification): tests/integration/test_command_line.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from helpers import png_size, quiet_trainer
from pytorch_lightning import LightningModule
from torch.utils.data import DataLoader

from lightning_order.cli.run_record import RunRecord, batch_tokens, fit_figures
from lightning_order.plotting import LOSS_CURVE_FILE


@pytest.mark.parametrize(
    ("batch", "tokens"),
    [
        ({"input_ids": torch.zeros(4, 16, dtype=torch.long), "labels": torch.zeros(4, 16)}, 64),
        (  # padding is not throughput: the attention mask's ones are counted
            {
                "input_ids": torch.zeros(2, 8, dtype=torch.long),
                "attention_mask": torch.tensor([[1] * 8, [1] * 3 + [0] * 5]),
            },
            11,
        ),
        ((torch.zeros(3, 10, dtype=torch.long), torch.zeros(3, 10, dtype=torch.long)), 30),  # nanoGPT (x, y)
        (torch.zeros(5, 4), 20),
        ({"features": torch.zeros(4, 3)}, 0),
    ],
)
def test_batch_tokens(batch: Any, tokens: int) -> None:
    assert batch_tokens(batch) == tokens


class _TinyLM(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32)

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.head(self.embedding(batch["input_ids"]))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def _loader() -> DataLoader:
    ids = torch.arange(8 * 9).remainder(32).reshape(8, 9)
    rows = [{"input_ids": row[:-1], "labels": row[1:]} for row in ids]
    return DataLoader(rows, batch_size=2)


@pytest.mark.parametrize("count_tokens", [True, False])
def test_a_fit_records_its_curve_and_throughput(tmp_path: Path, count_tokens: bool) -> None:
    record = RunRecord(count_tokens=count_tokens)
    trainer = quiet_trainer(tmp_path, callbacks=[record], max_epochs=2, limit_val_batches=2)
    trainer.fit(_TinyLM(), train_dataloaders=_loader(), val_dataloaders=_loader())
    assert [step for step, _ in record.train_loss] == list(range(1, 9))  # 4 batches x 2 epochs
    assert [step for step, _ in record.val_loss] == [4, 8]  # the sanity check is not a point
    assert record.train_seconds > 0
    assert record.tokens == (8 * 8 * 2 if count_tokens else 0)
    rows = dict(fit_figures(record, tmp_path / "logs", world_size=2))
    assert png_size(tmp_path / "logs" / LOSS_CURVE_FILE) == (640, 400)
    assert rows["loss curve"] == str(tmp_path / "logs" / LOSS_CURVE_FILE)
    if count_tokens:
        rate = record.tokens_per_second(world_size=2)
        assert rate is not None and rate > 0
        assert rows["train tokens per second"].startswith(f"{rate:,.0f} (256 tokens in ")
    else:
        assert "train tokens per second" not in rows  # not an LM: no throughput in tokens


def test_without_matplotlib_the_summary_says_how_to_get_the_curve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_order.cli.run_record as run_record

    monkeypatch.setattr(run_record, "can_plot", lambda: False)
    record = RunRecord()
    record.train_loss = [(1, 2.0)]
    assert fit_figures(record, tmp_path) == [
        ("loss curve", "not drawn: pip install 'lightning-order[plots]' (matplotlib)")
    ]
    assert not (tmp_path / LOSS_CURVE_FILE).exists()


def test_an_unwritable_loss_curve_is_a_summary_line_not_a_traceback(tmp_path: Path) -> None:
    """#42 item 9: the run trained; a curve that cannot be written says where, why and what to do."""
    (tmp_path / LOSS_CURVE_FILE).mkdir()  # a folder in the way: unwritable, whoever runs the test
    record = RunRecord()
    record.train_loss = [(1, 2.0), (2, float("nan"))]  # a run whose loss went to NaN draws too
    (row,) = fit_figures(record, tmp_path)
    assert row[0] == "loss curve"
    assert row[1].startswith(f"not written to {tmp_path / LOSS_CURVE_FILE} (IsADirectoryError")
    assert "\n" not in row[1] and "remove it" in row[1]


def test_an_fsspec_log_dir_gets_the_curve_in_its_own_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#42 item 9: a ``memory://`` (as an ``s3://``) log folder: no local folder named ``memory:``."""
    monkeypatch.chdir(tmp_path)
    fs = fsspec.filesystem("memory")
    logs = f"memory://{tmp_path.name}/lightning_logs/version_0"
    record = RunRecord()
    record.train_loss = [(1, 2.0), (2, 1.5)]
    try:
        assert fit_figures(record, logs) == [("loss curve", f"{logs}/{LOSS_CURVE_FILE}")]
        assert fs.cat(f"{logs}/{LOSS_CURVE_FILE}").startswith(b"\x89PNG")
        assert not list(tmp_path.iterdir())
    finally:
        fs.rm(f"memory://{tmp_path.name}", recursive=True)

"""OrderedTextClassifier through a Trainer: fit, validate and test log their metrics and write a checkpoint;
OrderedCausalLM with several validation dataloaders.

Shapes, dims and arguments without a Trainer: tests/unit/models/test_classifier.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import quiet_trainer
from torch.utils.data import DataLoader, Dataset

from lightning_order import OrderedTextClassifier

DIMS = {"vocab_size": 50, "num_features": 3, "num_classes": 4, "max_length": 12}


def _batch(
    size: int = 6, num_features: int = 3, length: int = 12, vocab: int = 50
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(size, length, dtype=torch.long)
    mask[:, length // 2 :] = 0
    ids = torch.randint(1, vocab, (size, length), generator=generator) * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "features": torch.randn(size, num_features, generator=generator),
        "labels": torch.randint(0, 4, (size,), generator=generator),
    }


class _Batches(Dataset):
    """Rows of the batch contract, learnable: the label is the first token's id modulo 4."""

    def __init__(self, rows: int = 64) -> None:
        batch = _batch(rows)
        batch["labels"] = batch["input_ids"][:, 0] % 4
        self.rows = [{key: value[i] for key, value in batch.items()} for i in range(rows)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.rows[index]


def test_fit_validate_test_log_metrics_and_checkpoint(tmp_path) -> None:
    loader = DataLoader(_Batches(), batch_size=16)
    model = OrderedTextClassifier(**DIMS)
    trainer = quiet_trainer(tmp_path, max_epochs=1, num_sanity_val_steps=2)
    trainer.fit(model, loader, loader)
    for name in ("train_loss", "train_acc", "val_loss", "val_acc", "val_f1"):
        assert name in trainer.callback_metrics, name
    assert 0.0 <= float(trainer.callback_metrics["val_acc"]) <= 1.0
    results = trainer.test(model, loader, verbose=False)
    assert {"test_loss", "test_acc", "test_f1"} <= set(results[0])
    predictions = trainer.predict(model, loader)
    assert predictions[0].shape == (16,)

    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    restored = OrderedTextClassifier.load_from_checkpoint(path)
    assert {k: restored.hparams[k] for k in DIMS} == DIMS


# -- OrderedCausalLM -------------------------------------------------------------------------------
def _lm_loader(ids: torch.Tensor) -> DataLoader:
    rows = [{"input_ids": row[:-1], "labels": row[1:]} for row in ids]
    return DataLoader(rows, batch_size=len(rows))


def test_causal_lm_validates_several_dataloaders_each_with_its_own_figures() -> None:
    from lightning_order import OrderedCausalLM

    generator = torch.Generator().manual_seed(0)
    random_ids = torch.randint(0, 100, (4, 17), generator=generator)
    constant_ids = torch.full((4, 17), 7)  # another loss: each loader's perplexity must be its own
    model = OrderedCausalLM(vocab_size=100, padded_vocab_size=128, block_size=16, n_layer=1, n_embd=32)
    trainer = quiet_trainer(None, max_steps=1, limit_val_batches=1)
    trainer.fit(
        model, _lm_loader(random_ids), val_dataloaders=[_lm_loader(random_ids), _lm_loader(constant_ids)]
    )
    metrics = trainer.callback_metrics
    for idx in (0, 1):
        loss, ppl = metrics[f"val_loss/dataloader_idx_{idx}"], metrics[f"val_ppl/dataloader_idx_{idx}"]
        assert ppl.item() == pytest.approx(math.exp(loss.item()), rel=1e-4)  # one batch each: ppl = exp(loss)
    assert metrics["val_loss/dataloader_idx_0"] != metrics["val_loss/dataloader_idx_1"]
    # One loader (the usual case) keeps the plain names.
    trainer = quiet_trainer(None, max_steps=1, limit_val_batches=1)
    trainer.validate(model, _lm_loader(random_ids), verbose=False)
    assert {"val_loss", "val_ppl"} <= set(trainer.callback_metrics)


def test_causal_lm_val_and_test_loss_are_the_mean_per_token_over_the_loader_ignoring_unscored_rows() -> None:
    """Uneven batches and a row with no target (an evaluation share's padding block): the flat token mean."""
    from torch.nn import functional as F

    from lightning_order import OrderedCausalLM

    torch.manual_seed(0)
    model = OrderedCausalLM(vocab_size=100, padded_vocab_size=128, block_size=16, n_layer=1, n_embd=32)
    ids = torch.randint(0, 100, (5, 17), generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": row[:-1], "labels": row[1:].clone()} for row in ids]
    rows[4]["labels"][:] = -100  # no target: scored by nobody
    loader = DataLoader(rows, batch_size=2)  # batches of 2, 2 and 1 rows
    with torch.no_grad():
        logits = model.eval()({"input_ids": ids[:, :-1]})
    labels = torch.stack([row["labels"] for row in rows])
    flat = F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()  # ignore_index=-100
    trainer = quiet_trainer(None)
    validated = trainer.validate(model, loader, verbose=False)[0]
    tested = trainer.test(model, loader, verbose=False)[0]
    for found, name in ((validated, "val"), (tested, "test")):
        assert found[f"{name}_loss"] == pytest.approx(flat, rel=1e-6)
        assert found[f"{name}_ppl"] == pytest.approx(math.exp(flat), rel=1e-6)

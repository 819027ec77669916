"""OrderValidator on LM runs: each new rule code injected for real, before step 1; resume refused on changed data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator, SymptomMonitor
from lightning_order.data.lm.artefacts import read_blocks

SMALL = {"max_documents": 300, "vocab_size": 400, "block_size": 32, "batch_size": 8}
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 32}


def _dm(cache: Path, **kwargs) -> OrderedLMDataModule:
    return OrderedLMDataModule(**{**SMALL, **kwargs}, cache_dir=str(cache))


class _StepCounter(pl.Callback):
    """Counts optimizer steps that really ran."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *args, **kwargs) -> None:
        self.batches += 1


def test_correct_lm_run_passes_the_default_callbacks(tmp_path: Path) -> None:
    dm = _dm(tmp_path / "cache")
    model = OrderedCausalLM(**dm.dims, **MODEL)
    validator = OrderValidator()
    trainer = quiet_trainer(
        tmp_path, [validator, SymptomMonitor()], max_steps=3, val_check_interval=3, limit_val_batches=2
    )
    trainer.fit(model, dm)
    assert trainer.global_step == 3
    assert validator.violations == []
    assert [r.step for r in dm.ledger][-4:] == ["init_model", "configure_optimizers", "train", "evaluate"]
    assert dm.ledger.latest("init_model").params["padded_vocab_size"] == dm.dims["padded_vocab_size"]


def test_pad_token_added_after_the_model_is_refused_before_step_1(tmp_path: Path) -> None:
    dm = _dm(tmp_path / "cache")
    model = OrderedCausalLM(**dm.dims, **MODEL)
    dm.tokenizer.add_special_tokens(["<pad>"])  # the classic mistake: after the model was built
    counter = _StepCounter()
    trainer = quiet_trainer(tmp_path, [OrderValidator(), counter], max_steps=3)
    with pytest.raises(OrderError) as err:
        trainer.fit(model, dm)
    assert err.value.rules == ["vocab-changed-after-init"]
    assert counter.batches == 0 and trainer.global_step == 0


@pytest.mark.parametrize("block_size", [16, 64])
def test_a_model_of_another_block_size_is_refused_before_step_1(tmp_path: Path, block_size: int) -> None:
    """The data's blocks hold 32 tokens: a model of 16 positions fails at step 1, one of 64 trains silently."""
    dm = _dm(tmp_path / "cache")
    model = OrderedCausalLM(**{**dm.dims, "block_size": block_size}, **MODEL)
    counter = _StepCounter()
    trainer = quiet_trainer(tmp_path, [OrderValidator(), counter], max_steps=3)
    with pytest.raises(OrderError) as err:
        trainer.fit(model, dm)
    assert err.value.rules == ["init-before-data"]
    assert f"hparams.block_size is {block_size}, the data's block_size is 32" in str(err.value)
    assert counter.batches == 0 and trainer.global_step == 0
    assert dm.ledger.latest("init_model") is None  # refused before the model step was recorded


def test_without_the_validator_the_same_run_trains_on_a_wrong_table(tmp_path: Path) -> None:
    """No crash: the pad id lands in the padding rows, which training never touches (silently wrong)."""
    dm = _dm(tmp_path / "cache")
    model = OrderedCausalLM(**dm.dims, **MODEL)
    dm.tokenizer.add_special_tokens(["<pad>"])
    pad = dm.tokenizer.token_to_id("<pad>")
    assert pad == dm.dims["vocab_size"] < dm.dims["padded_vocab_size"]
    before = model.token_embedding.weight[pad].detach().clone()
    trained_before = model.token_embedding.weight[1].detach().clone()
    trainer = quiet_trainer(tmp_path, [], max_steps=3)
    trainer.fit(model, dm)
    assert trainer.global_step == 3  # it trained
    assert not torch.equal(model.token_embedding.weight[1], trained_before)  # real rows learn...
    assert torch.equal(model.token_embedding.weight[pad], before)  # ...the pad row never does
    # And its logit is masked: the model can never predict the token the tokenizer now holds.
    assert torch.isinf(model(torch.tensor([[1, 2]]))[0, -1, pad])


def test_without_padding_headroom_the_pad_id_crashes(tmp_path: Path) -> None:
    dm = _dm(tmp_path / "cache", pad_vocab_multiple=1)
    model = OrderedCausalLM(**dm.dims, **MODEL)
    dm.tokenizer.add_special_tokens(["<pad>"])
    padded_batch = dm.tokenizer.encode("Return the <pad>").ids
    with pytest.raises(IndexError, match="index out of range"):
        model(torch.tensor([padded_batch]))


def test_pack_without_eos_is_caught_before_step_1(tmp_path: Path) -> None:
    dm = _dm(tmp_path / "cache", eos=False, enforce=False)
    model = OrderedCausalLM(**dm.dims, **MODEL)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3)
    with pytest.raises(OrderError) as err:
        trainer.fit(model, dm)
    assert "pack-without-eos" in err.value.rules
    assert trainer.global_step == 0


class _HandWritten(pl.LightningDataModule):
    """A hand-written LM datamodule: only a tokenizer, an eos id and blocks (no ledger)."""

    def __init__(self, tokenizer, blocks: np.ndarray, eos: int) -> None:
        super().__init__()
        self.tokenizer, self.eos_token_id, self.blocks = tokenizer, eos, blocks

    def train_dataloader(self):
        data = torch.from_numpy(self.blocks.astype(np.int64))
        items = [{"input_ids": b[:-1], "labels": b[1:]} for b in data]
        return torch.utils.data.DataLoader(items, batch_size=8)


def test_hand_written_lm_datamodule_gets_the_checks(tmp_path: Path) -> None:
    dm = _dm(tmp_path / "cache")
    dm.prepare_data()
    blocks = np.asarray(read_blocks(dm.cache_path)["train"])
    no_eos = np.where(blocks == dm.eos_token_id, 5, blocks)
    size = dm.dims["vocab_size"]
    small = OrderedCausalLM(vocab_size=size - 10, padded_vocab_size=size - 10, block_size=32, **MODEL)
    # No ledger: a sample of 32 k tokens or more without any end-of-text id is evidence enough.
    trainer = quiet_trainer(tmp_path, [OrderValidator(sample_rows=1024)], max_steps=1)
    with pytest.raises(OrderError) as err:
        trainer.fit(small, _HandWritten(dm.tokenizer, no_eos, dm.eos_token_id))
    assert set(err.value.rules) >= {"vocab-changed-after-init", "pack-without-eos"}
    fits = OrderedCausalLM(vocab_size=size, padded_vocab_size=size, block_size=32, **MODEL)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=1)
    trainer.fit(fits, _HandWritten(dm.tokenizer, blocks, dm.eos_token_id))
    assert trainer.global_step == 1


def _fit_and_checkpoint(tmp_path: Path, dm: OrderedLMDataModule) -> Path:
    # A periodic checkpoint, written during the fit: one saved after fit() returned at max_steps
    # counts the unfinished epoch as ended (resume-position, tests/integration/test_resume.py).
    model = OrderedCausalLM(**dm.dims, **MODEL)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, filename="first")
    trainer = quiet_trainer(tmp_path, [OrderValidator(), checkpoint], max_steps=2, enable_checkpointing=True)
    trainer.fit(model, dm)
    return tmp_path / "ckpt" / "first.ckpt"


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [("nothing", {}), ("corpus", {"max_documents": 250}), ("tokenizer", {"vocab_size": 380})],
)
def test_resume_is_refused_when_corpus_or_tokenizer_changed(
    tmp_path: Path, change: str, kwargs: dict
) -> None:
    path = _fit_and_checkpoint(tmp_path, _dm(tmp_path / "cache"))
    dm = _dm(tmp_path / "cache", **kwargs)
    model = OrderedCausalLM(**dm.dims, **MODEL)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=4)
    if change == "nothing":
        trainer.fit(model, dm, ckpt_path=str(path))
        assert trainer.global_step == 4  # resumed at step 2 and went on
        return
    with pytest.raises(OrderError) as err:
        trainer.fit(model, dm, ckpt_path=str(path))
    assert err.value.rules == ["resume-data-changed"]
    assert change in str(err.value)
    assert trainer.global_step == 0


@pytest.mark.parametrize("namespace", ["pytorch_lightning", "lightning.pytorch"])
def test_lm_classes_under_both_lightning_namespaces(tmp_path: Path, namespace: str) -> None:
    import importlib

    ns = importlib.import_module(namespace)
    dm = _dm(tmp_path / "cache")
    model = OrderedCausalLM(**dm.dims, **MODEL)
    validator = OrderValidator()
    trainer = ns.Trainer(
        callbacks=[validator, SymptomMonitor()],
        max_steps=2,
        limit_val_batches=1,
        val_check_interval=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, dm)
    assert trainer.global_step == 2 and validator.violations == []
    assert dm.ledger.steps()[-1] == "evaluate"

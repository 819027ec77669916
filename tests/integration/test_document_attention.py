"""Document-aware packing through a Trainer: ``OrderedLMDataModule(document_attention=True)`` with
``OrderedCausalLM`` and a tiny ``LlamaForCausalLM`` (built offline from a config), the validator silent on
correct runs and refusing before step 1 a model that falls back to attention across documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import HFWrapper, quiet_trainer, tiny_llama

from lightning_order import OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator

SMALL = {
    "max_documents": 200,
    "vocab_size": 400,
    "block_size": 32,
    "batch_size": 8,
    "document_attention": True,
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("documents_cache")


def _dm(cache: Path, **kwargs: Any) -> OrderedLMDataModule:
    return OrderedLMDataModule(**{**SMALL, **kwargs}, cache_dir=str(cache))


def _llama(dm: OrderedLMDataModule, **config: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return tiny_llama(dm, num_hidden_layers=2, **config)


def _boundary_row(dm: OrderedLMDataModule) -> tuple[dict[str, torch.Tensor], int]:
    """A train row of the datamodule holding a document boundary, and the index of its end-of-text."""
    for batch in dm.train_dataloader():
        for row, ids in enumerate(batch["input_ids"]):
            hits = (ids[:-1] == dm.eos_token_id).nonzero().flatten().tolist()
            if hits and hits[0] >= 1:
                return {k: v[row : row + 1] for k, v in batch.items() if k != "labels"}, hits[0]
    raise AssertionError("no train row holds a document boundary")


def _next_document_moves(logits_of: Any, row: dict[str, torch.Tensor], eos_at: int, eos_id: int) -> float:
    """How far the next document's logits move when every token of the previous document changes."""
    changed = row["input_ids"].clone()
    other = (changed[0, :eos_at] + 1) % SMALL["vocab_size"]
    changed[0, :eos_at] = torch.where(other == eos_id, (eos_id + 1) % SMALL["vocab_size"], other)
    with torch.no_grad():
        before, after = logits_of(row), logits_of({**row, "input_ids": changed})
    moved = (before[0, eos_at + 1 :] - after[0, eos_at + 1 :]).nan_to_num(posinf=0.0, neginf=0.0)
    return float(moved.abs().max())


@pytest.mark.slow
def test_ordered_causal_lm_trains_on_documents_kept_apart(tmp_path: Path, cache: Path) -> None:
    dm = _dm(cache)
    model = OrderedCausalLM(**dm.dims, n_layer=2, n_embd=32)
    validator = OrderValidator()
    trainer = quiet_trainer(tmp_path, [validator], max_steps=3, limit_val_batches=2)
    trainer.fit(model, dm)
    assert trainer.global_step == 3 and validator.violations == []
    assert dm.ledger.info["document_attention"] is True
    row, eos_at = _boundary_row(dm)
    assert set(row) == {"input_ids", "position_ids"} and int(row["position_ids"][0, eos_at + 1]) == 0
    model.eval()
    assert _next_document_moves(model, row, eos_at, dm.eos_token_id) == 0.0
    plain = {"input_ids": row["input_ids"]}  # without position_ids: today's model, attending across
    assert _next_document_moves(model, plain, eos_at, dm.eos_token_id) > 0.0


@pytest.mark.slow
def test_a_llama_without_cache_trains_on_documents_kept_apart(tmp_path: Path, cache: Path) -> None:
    dm = _dm(cache)
    model = _llama(dm, use_cache=False)
    validator = OrderValidator()
    trainer = quiet_trainer(tmp_path, [validator], max_steps=3, limit_val_batches=0)
    trainer.fit(HFWrapper(model), dm)
    assert trainer.global_step == 3 and validator.violations == []
    assert dm.batch_format == "hf" and dm.ledger.info["document_attention"] is True
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {
        "input_ids",
        "labels",
        "position_ids",
    }  # no attention_mask: transformers' packed form
    assert torch.equal(batch["labels"], batch["input_ids"])
    row, eos_at = _boundary_row(dm)
    model.eval()
    assert _next_document_moves(lambda b: model(**b).logits, row, eos_at, dm.eos_token_id) == 0.0


@pytest.mark.slow
def test_a_llama_with_its_cache_on_is_refused_before_step_1(tmp_path: Path, cache: Path) -> None:
    """transformers ignores packed position_ids while the key-value cache is on: attention crosses documents."""
    dm = _dm(cache)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3, limit_val_batches=0)
    with pytest.raises(OrderError) as err:
        trainer.fit(HFWrapper(_llama(dm)), dm)
    assert err.value.rules == ["attention-crosses-documents"]
    assert trainer.global_step == 0
    message = str(err.value)
    assert "LlamaForCausalLM ignores the document boundaries" in message and "use_cache = False" in message

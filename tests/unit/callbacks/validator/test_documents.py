"""``lightning_order.callbacks.validator.documents``: with document-aware packing on, the sampled batch's
positions and a probe forward on the model; ``attention-crosses-documents`` when attention crosses a boundary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_order import OrderedCausalLM
from lightning_order.callbacks.validator.lm import document_attention_on, document_violations, probe_leak
from lightning_order.ledger import StepLedger
from lightning_order.models.attention import document_positions

EOS = 1
VOCAB = {"vocab_size": 60, "padded_vocab_size": 64, "block_size": 16}


def _dm(on: bool = True, recorded: bool | None = None) -> Any:
    ledger = StepLedger()
    if recorded is not None:
        ledger.info["document_attention"] = recorded
    return SimpleNamespace(config=SimpleNamespace(document_attention=on), ledger=ledger)


def _batch(positions: bool = True) -> dict[str, torch.Tensor]:
    ids = torch.randint(2, 60, (4, 16), generator=torch.Generator().manual_seed(0))
    ids[:, 5] = EOS
    ids[2, 11] = EOS
    batch = {"input_ids": ids, "labels": ids.roll(-1, 1)}
    if positions:
        batch["position_ids"] = document_positions(ids, EOS)
    return batch


class IgnoresPositions(OrderedCausalLM):
    """A model that drops ``position_ids``: plain causal attention over the whole block."""

    def forward(self, batch: Any) -> torch.Tensor:
        return super().forward(batch["input_ids"] if isinstance(batch, dict) else batch)


def _model(cls: type = OrderedCausalLM) -> OrderedCausalLM:
    torch.manual_seed(0)
    return cls(**VOCAB, n_layer=1, n_embd=32)


def test_the_option_is_read_from_the_ledger_first_then_the_config() -> None:
    assert document_attention_on(_dm(on=True)) and not document_attention_on(_dm(on=False))
    assert document_attention_on(_dm(on=False, recorded=True))
    assert not document_attention_on(_dm(on=True, recorded=False))
    assert not document_attention_on(SimpleNamespace())  # a hand-written datamodule: off


def test_a_correct_run_is_silent() -> None:
    assert document_violations(_dm(), _model(), _batch(), EOS) == []


def test_off_nothing_is_judged() -> None:
    assert document_violations(_dm(on=False), IgnoresPositions(**VOCAB, n_layer=1), _batch(False), EOS) == []


def test_batches_without_positions_cross_documents() -> None:
    [violation] = document_violations(_dm(), _model(), _batch(positions=False), EOS)
    assert violation.rule == "attention-crosses-documents" and "hold no position_ids" in violation.message


def test_positions_that_do_not_restart_after_end_of_text_cross_documents() -> None:
    batch = _batch()
    batch["position_ids"] = torch.arange(16).expand(4, 16).clone()  # today's positions, never restarting
    [violation] = document_violations(_dm(), _model(), batch, EOS)
    assert violation.rule == "attention-crosses-documents"
    assert "4 of 4 sampled train rows hold position_ids that do not restart" in violation.message


def test_a_model_that_ignores_the_positions_is_caught_by_the_probe() -> None:
    [violation] = document_violations(_dm(), _model(IgnoresPositions), _batch(), EOS)
    assert violation.rule == "attention-crosses-documents"
    assert "IgnoresPositions ignores the document boundaries" in violation.message
    assert violation.details["leak"] > 1e-3


def test_the_probe_leaves_the_model_as_it_was() -> None:
    model = _model()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert probe_leak(model, _batch(), EOS) == 0.0
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_no_probe_without_a_boundary_or_for_an_unknown_model() -> None:
    batch = _batch()
    batch["input_ids"][:, 5] = 7
    batch["input_ids"][2, 11] = 7
    assert probe_leak(_model(), batch, EOS) is None  # no end-of-text: nothing to perturb
    assert probe_leak(torch.nn.Linear(2, 2), _batch(), EOS) is None


def _llama(use_cache: bool | None) -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    if use_cache is not None:
        config.use_cache = use_cache
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def _hf_batch(mask: bool = False) -> dict[str, torch.Tensor]:
    batch = _batch()
    batch["labels"] = batch["input_ids"].clone()
    if mask:
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return batch


def test_a_llama_without_cache_and_mask_keeps_documents_apart() -> None:
    assert document_violations(_dm(), _llama(use_cache=False), _hf_batch(), EOS) == []


@pytest.mark.parametrize(("use_cache", "mask"), [(None, False), (False, True)], ids=["cache-on", "mask"])
def test_a_llama_that_falls_back_to_causal_attention_is_caught(use_cache: bool | None, mask: bool) -> None:
    """transformers reads packed position_ids only without an attention_mask and without a cache."""
    [violation] = document_violations(_dm(), _llama(use_cache), _hf_batch(mask), EOS)
    assert violation.rule == "attention-crosses-documents"
    assert "LlamaForCausalLM ignores the document boundaries" in violation.message
    assert "use_cache = False" in violation.message

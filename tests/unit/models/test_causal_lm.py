"""OrderedCausalLM: tied by default, padding rows masked, perplexity, generation that stops at end-of-text."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_order import NotFiniteError, OrderedCausalLM
from lightning_order.models.attention import document_positions

DIMS = {"vocab_size": 100, "padded_vocab_size": 128, "block_size": 16}
#: The step methods log; without a Trainer Lightning warns and logs nothing (it supports calling them so).
WITHOUT_TRAINER = pytest.mark.filterwarnings("ignore:You are trying to .self.log")


def test_tied_by_default_untied_on_request() -> None:
    tied = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32)
    assert tied.lm_head.weight is tied.token_embedding.weight
    untied = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32, tie_weights=False)
    assert untied.lm_head.weight is not untied.token_embedding.weight
    assert tied.get_output_embeddings().weight.shape == (128, 32) == tied.get_input_embeddings().weight.shape


@WITHOUT_TRAINER
def test_padding_logits_are_masked_and_loss_starts_near_uniform() -> None:
    torch.manual_seed(0)
    model = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32)
    ids = torch.randint(0, 100, (4, 16))
    logits = model({"input_ids": ids})
    assert logits.shape == (4, 16, 128)
    assert torch.isinf(logits[..., 100:]).all() and torch.isfinite(logits[..., :100]).all()
    loss = model.training_step({"input_ids": ids, "labels": torch.randint(0, 100, (4, 16))}, 0)
    assert abs(loss.item() - math.log(100)) < 0.3  # over the 100 real tokens, not the 128 rows


def test_causal_the_past_does_not_see_the_future() -> None:
    model = OrderedCausalLM(**DIMS, n_layer=2, n_embd=32).eval()
    ids = torch.randint(0, 100, (1, 16))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % 100
    assert torch.allclose(model(ids)[0, :-1], model(changed)[0, :-1])


def test_generate_stops_at_eos_and_is_seeded() -> None:
    model = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32, tie_weights=False)
    with torch.no_grad():  # every hidden state becomes all ones, and only id 7's head row sees it
        model.norm.weight.zero_()
        model.norm.bias.fill_(1.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[7] = 1.0
    out = model.generate([1, 2, 3], 20, eos_token_id=7, temperature=0.01)
    assert out == [7]
    free = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32)
    assert free.generate([1], 10, seed=3) == free.generate([1], 10, seed=3)
    assert all(t < 100 for t in free.generate([1], 30, top_k=None, temperature=2.0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab_size": 200, "padded_vocab_size": 128, "block_size": 16},
        {**DIMS, "n_head": 3},
        {**DIMS, "block_size": 0},
    ],
)
def test_bad_dims_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="expected"):
        OrderedCausalLM(**kwargs)


@WITHOUT_TRAINER
def test_val_perplexity_is_exp_of_the_loss() -> None:
    model = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32)
    ids = torch.randint(0, 100, (4, 16))
    batch = {"input_ids": ids, "labels": ids}
    loss = model.training_step(batch, 0)  # dropout is 0 by default: the same loss in both steps
    model.validation_step(batch, 0)
    assert model.val_ppl.compute().item() == pytest.approx(math.exp(loss.item()), rel=1e-4)


def _two_documents(eos: int = 1) -> tuple[torch.Tensor, torch.Tensor, int]:
    torch.manual_seed(0)
    ids = torch.randint(2, 100, (2, 16))
    ids[:, 6] = eos  # the first document ends at 6; the next starts at 7
    return ids, document_positions(ids, eos), 7


def test_position_ids_keep_documents_apart() -> None:
    """With position_ids, the next document's logits do not move when the previous document's tokens change."""
    model = OrderedCausalLM(**DIMS, n_layer=2, n_embd=32).eval()
    ids, positions, start = _two_documents()
    changed = ids.clone()
    changed[:, :6] = torch.randint(2, 100, (2, 6))
    with torch.no_grad():
        apart = model({"input_ids": ids, "position_ids": positions})
        apart_changed = model({"input_ids": changed, "position_ids": positions})
        plain = model({"input_ids": ids})
        plain_changed = model({"input_ids": changed})
    real = slice(0, DIMS["vocab_size"])
    assert torch.equal(apart[:, start:, real], apart_changed[:, start:, real])
    assert not torch.allclose(plain[:, start:, real], plain_changed[:, start:, real])  # today's: it leaks


def test_a_document_is_read_as_if_it_opened_the_block() -> None:
    """Positions from position_ids: the next document's logits equal those of it alone at the block start."""
    model = OrderedCausalLM(**DIMS, n_layer=2, n_embd=32).eval()
    ids, positions, start = _two_documents()
    with torch.no_grad():
        packed = model({"input_ids": ids, "position_ids": positions})[:, start:, : DIMS["vocab_size"]]
        alone = model({"input_ids": ids[:, start:]})[..., : DIMS["vocab_size"]]
    assert torch.allclose(packed, alone, atol=1e-5)


def test_without_position_ids_the_forward_is_unchanged() -> None:
    """One document per row: position_ids 0..T-1 give the plain causal model's logits."""
    model = OrderedCausalLM(**DIMS, n_layer=2, n_embd=32).eval()
    ids = torch.randint(2, 100, (2, 16))
    with torch.no_grad():
        plain = model({"input_ids": ids})
        positions = model({"input_ids": ids, "position_ids": torch.arange(16).expand(2, 16)})
    assert torch.allclose(plain[..., :100], positions[..., :100], atol=1e-5)


def test_a_model_whose_weights_went_to_nan_refuses_to_generate_in_one_line() -> None:
    """#42 item 9: not torch's ``probability tensor contains either inf, nan``."""
    model = OrderedCausalLM(**DIMS, n_layer=1, n_embd=32)
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(NotFiniteError, match=r"^generate: the model's logits are not finite .*diverged"):
        model.generate([1, 2, 3], 5)

"""OrderedLMDataModule with ``transformers`` causal LMs (built offline from tiny configs), with zero glue.

``batch_format="auto"`` gives a ``transformers`` model unshifted labels and an attention mask, so its
own loss is the next-token loss (computed here by hand); ``"shifted"`` batches fed to it give the
next-next-token loss (the old bug, shown) and the validator refuses them before step 1
(``labels-shifted-twice``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import HFWrapper, quiet_trainer, tiny_llama
from torch.nn import functional as F

from lightning_order import OrderedLMDataModule, OrderError, OrderValidator

transformers = pytest.importorskip("transformers")

SMALL = {"max_documents": 200, "vocab_size": 400, "block_size": 32, "batch_size": 8}


def _gpt2(dm: OrderedLMDataModule) -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=dm.padded_vocab_size, n_positions=dm.block_size
    )
    return transformers.GPT2LMHeadModel(config)


def _llama(dm: OrderedLMDataModule) -> torch.nn.Module:
    return tiny_llama(dm)


BUILDERS = {"GPT2LMHeadModel": _gpt2, "LlamaForCausalLM": _llama}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_cache")


def _dm(cache: Path, **kwargs: Any) -> OrderedLMDataModule:
    return OrderedLMDataModule(**{**SMALL, **kwargs}, cache_dir=str(cache))


def _first_batch(dm: OrderedLMDataModule) -> dict[str, torch.Tensor]:
    return next(iter(dm.train_dataloader()))


def _loss_against(model: torch.nn.Module, batch: dict[str, torch.Tensor], targets: torch.Tensor) -> float:
    """The cross-entropy of the model's logits at every position but the last against ``targets``."""
    logits = model(input_ids=batch["input_ids"]).logits
    return float(F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten()))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_hf_model_trains_with_zero_glue_on_the_next_token_loss(
    tmp_path: Path, cache: Path, name: str
) -> None:
    dm = _dm(cache)
    model = BUILDERS[name](dm)
    validator = OrderValidator()
    trainer = quiet_trainer(tmp_path, [validator], max_steps=3, limit_val_batches=0)
    trainer.fit(HFWrapper(model), dm)
    assert trainer.global_step == 3 and validator.violations == []
    assert dm.batch_format == "hf"
    assert dm.ledger.info["batch_format"] == {"format": "hf", "requested": "auto", "model": name}
    batch = _first_batch(dm)
    assert set(batch) == {"input_ids", "labels", "attention_mask"}
    assert torch.equal(batch["labels"], batch["input_ids"]) and bool(batch["attention_mask"].all())
    model.eval()
    with torch.no_grad():
        loss = float(model(**batch).loss)
        by_hand = _loss_against(model, batch, batch["input_ids"][:, 1:])
    assert loss == pytest.approx(by_hand, abs=1e-5)


@pytest.mark.slow
def test_shifted_batches_give_an_hf_model_the_next_next_token_loss(cache: Path) -> None:
    """The old bug, shown: pre-shifted labels are shifted again by the model (token t -> t + 2)."""
    dm = _dm(cache, batch_format="shifted")
    dm.setup("fit")
    model = _gpt2(dm).eval()
    batch = _first_batch(dm)
    assert set(batch) == {"input_ids", "labels"}
    with torch.no_grad():
        loss = float(model(**batch).loss)
        next_next = _loss_against(model, batch, batch["labels"][:, 1:])
        next_token = _loss_against(model, batch, batch["input_ids"][:, 1:])
    assert loss == pytest.approx(next_next, abs=1e-5)
    # The targets it learns are the tokens two ahead (at random init the two losses are close, so
    # the targets themselves are compared, not the figures).
    assert torch.equal(batch["labels"][:, 1:-1], batch["input_ids"][:, 2:])
    assert not torch.equal(batch["labels"][:, 1:], batch["input_ids"][:, 1:])
    assert loss != pytest.approx(next_token, abs=1e-7)


@pytest.mark.slow
def test_shifted_batches_into_an_hf_model_are_refused_before_step_1(tmp_path: Path, cache: Path) -> None:
    dm = _dm(cache, batch_format="shifted")
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3, limit_val_batches=0)
    with pytest.raises(OrderError) as err:
        trainer.fit(HFWrapper(_gpt2(dm)), dm)
    assert err.value.rules == ["labels-shifted-twice"]
    assert trainer.global_step == 0
    message = str(err.value)
    assert "GPT2LMHeadModel" in message and 'batch_format="hf"' in message
    assert dm.ledger.info["batch_format"] == {
        "format": "shifted",
        "requested": "shifted",
        "model": "GPT2LMHeadModel",
    }


@pytest.mark.slow
def test_hf_batches_into_ordered_causal_lm_are_refused_before_step_1(tmp_path: Path, cache: Path) -> None:
    """The mirror of the old bug: labels equal to the inputs, fed to a model that does not shift them."""
    from lightning_order import OrderedCausalLM

    dm = _dm(cache, batch_format="hf")
    model = OrderedCausalLM(**dm.dims)
    trainer = quiet_trainer(tmp_path, [OrderValidator()], max_steps=3, limit_val_batches=0)
    with pytest.raises(OrderError) as err:
        trainer.fit(model, dm)
    assert err.value.rules == ["labels-not-shifted"] and trainer.global_step == 0
    assert "OrderedCausalLM" in str(err.value) and 'batch_format="shifted"' in str(err.value)

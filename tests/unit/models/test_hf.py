"""models/hf.py: a transformers causal LM found in a module (itself, ``.model``, a direct child), never imported."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from helpers import in_preloaded_process, start_preloaded

from lightning_order import OrderedCausalLM
from lightning_order.models.hf import hf_causal_lm

transformers = pytest.importorskip("transformers")
start_preloaded()  # its imports overlap the other tests

CONFIG = {"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 64, "n_positions": 8}


class _Wrapper(pl.LightningModule):
    def __init__(self, model: torch.nn.Module, attribute: str = "model") -> None:
        super().__init__()
        setattr(self, attribute, model)


class _MyGPT(transformers.GPT2LMHeadModel):
    pass


@pytest.fixture(scope="module")
def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))


def test_the_model_itself_its_model_attribute_or_a_child_is_found(gpt2) -> None:
    assert hf_causal_lm(gpt2) is gpt2
    assert hf_causal_lm(_Wrapper(gpt2)) is gpt2
    assert hf_causal_lm(_Wrapper(gpt2, "backbone")) is gpt2  # a direct child under any name
    mine = _MyGPT(transformers.GPT2Config(**CONFIG))
    assert hf_causal_lm(mine) is mine  # a user's subclass is still a causal LM


def test_models_that_do_not_shift_labels_are_not_found() -> None:
    assert hf_causal_lm(transformers.GPT2Model(transformers.GPT2Config(**CONFIG))) is None  # no LM head
    assert (
        hf_causal_lm(OrderedCausalLM(vocab_size=64, padded_vocab_size=64, block_size=8, n_layer=1, n_embd=16))
        is None
    )
    assert hf_causal_lm(None) is None


@pytest.mark.slow
def test_transformers_models_are_never_imported() -> None:
    """Lightning's imports load ``transformers``' lazy top module; its modelling code is never loaded here."""
    code = (
        "import json, sys, torch\n"
        "from lightning_order.models.hf import hf_causal_lm\n"
        "found = hf_causal_lm(torch.nn.Linear(2, 2))\n"
        "print(json.dumps([found is None, 'transformers.modeling_utils' in sys.modules]))\n"
    )
    assert in_preloaded_process(code) == [True, False]

"""What an LM run summary prints after its metrics (lightning_order/data/lm/figures.py), also after a
run whose loss went to NaN.

The LM figures of ``audit`` and ``prepare``: tests/unit/cli/test_auditing_lm.py; the summary of a
real fit: tests/integration/test_command_line.py.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import torch
from rich.console import Console
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from lightning_order import OrderedCausalLM
from lightning_order.data.lm.figures import print_lm_summary

WORDS = ["<|endoftext|>", "[UNK]", "the", "order", "of", "data", "preparation", "is", "checked"]


def _datamodule() -> SimpleNamespace:
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    documents = ["the order of data preparation is checked\nthe data"]
    return SimpleNamespace(
        tokenizer=tokenizer, eos_token_id=0, eos_token=WORDS[0], documents=lambda split: documents
    )


def _summary(model: OrderedCausalLM, metrics: dict[str, float]) -> str:
    out = io.StringIO()
    print_lm_summary(Console(file=out, width=200), _datamodule(), model, "fit", metrics)
    return out.getvalue()


def test_a_summary_samples_a_continuation_of_a_validation_prompt() -> None:
    model = OrderedCausalLM(vocab_size=len(WORDS), padded_vocab_size=16, block_size=16, n_layer=1, n_embd=16)
    text = _summary(model, {"val_loss": 2.0})
    assert "validation perplexity: 7.39" in text
    assert "sampled continuation" in text and "the order of data preparation is" in text


def test_a_run_whose_loss_went_to_nan_gets_its_summary_without_a_continuation() -> None:
    """#42 item 9: the summary ends with one line that says why, not torch's sampling error."""
    model = OrderedCausalLM(vocab_size=len(WORDS), padded_vocab_size=16, block_size=16, n_layer=1, n_embd=16)
    with torch.no_grad():
        model.token_embedding.weight.fill_(float("nan"))
    text = _summary(model, {"val_loss": float("nan")})
    assert "validation perplexity: nan" in text
    assert "no sampled continuation: the model's logits are not finite" in text
    assert "sampled continuation (prompt" not in text

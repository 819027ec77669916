"""What a run summary prints after the metrics, per pipeline (the descriptor's ``summary``).

:func:`print_lm_summary` (causal language modelling): the validation perplexity and, after
``fit``, a sampled continuation of the first words of a validation document.
"""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text

__all__ = ["print_lm_summary", "sample_continuation"]


def print_lm_summary(
    console: Any, datamodule: Any, model: Any, stage: str, metrics: dict[str, float]
) -> None:
    """Validation perplexity and, after ``fit``, a sampled continuation."""
    ppl = metrics.get("val_ppl", math.exp(metrics["val_loss"]) if "val_loss" in metrics else None)
    if ppl is not None:
        console.print(Text.assemble(("validation perplexity: ", "bold"), f"{ppl:.2f}"))
    if stage == "fit" and model is not None:
        prompt, continuation = sample_continuation(model, datamodule)
        if prompt is not None:
            console.print(Text("sampled continuation (prompt, then the model's text):", style="bold"))
            console.print(Text.assemble((prompt, "cyan"), continuation))


def sample_continuation(
    model: Any, datamodule: Any, prompt_words: int = 6, new_tokens: int = 60
) -> tuple[Any, str]:
    """The first words of a validation document and the model's sampled continuation of them (seeded).

    The document is the first of the validation split whose first line has at least
    ``prompt_words`` words (a sentence rather than a title), so the prompt ends on a word boundary.

    Returns:
        ``(prompt text, continuation text)``, or ``(None, "")`` when the datamodule has no
        tokenizer or documents, or the model cannot generate.
    """
    generate = getattr(model, "generate", None)
    try:
        tokenizer, eos = datamodule.tokenizer, int(datamodule.eos_token_id)
        documents = datamodule.documents("val")
    except (AttributeError, IndexError, KeyError, TypeError):
        return None, ""
    if not callable(generate):
        return None, ""
    lines = [doc.split("\n", 1)[0].split() for doc in documents]
    words = next((line for line in lines if len(line) >= prompt_words), lines[0] if lines else [])
    if not words:
        return None, ""
    prompt = " ".join(words[:prompt_words])
    new = generate([eos, *tokenizer.encode(prompt).ids], new_tokens, eos_token_id=eos, seed=0)
    ended = bool(new) and new[-1] == eos
    text = tokenizer.decode([t for t in new if t != eos])
    return prompt, text + (f" {getattr(datamodule, 'eos_token', '<|endoftext|>')}" if ended else " …")

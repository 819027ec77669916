"""What an LM run summary prints after the metrics, and ``audit`` under an LM ledger (the LM spec's
``summary`` and ``figures``).

:func:`print_lm_summary` (causal language modelling): the validation perplexity and, after
``fit``, a sampled continuation of the first words of a validation document.
:func:`lm_figures`: the numbers an LLM engineer reads off an LM ledger (documents, duplicates,
the tokenizer's origin, tokens, end-of-text, blocks, dropped tokens), for ``audit`` and ``prepare``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.text import Text

from lightning_order.errors import NotFiniteError

if TYPE_CHECKING:
    from lightning_order.ledger import StepLedger

__all__ = ["lm_figures", "print_lm_summary", "sample_continuation"]


def print_lm_summary(
    console: Any, datamodule: Any, model: Any, stage: str, metrics: dict[str, float]
) -> None:
    """Validation perplexity and, after ``fit``, a sampled continuation (a line saying why not, when none)."""
    ppl = metrics.get("val_ppl", math.exp(metrics["val_loss"]) if "val_loss" in metrics else None)
    if ppl is not None:
        console.print(Text.assemble(("validation perplexity: ", "bold"), f"{ppl:.2f}"))
    if stage == "fit" and model is not None and _sharded(model):
        # Only rank 0 prints: a forward of a sharded model needs every rank's collectives.
        console.print("no sampled continuation: the model is sharded across ranks (DTensor parameters)")
    elif stage == "fit" and model is not None:
        try:
            prompt, continuation = sample_continuation(model, datamodule)
        except NotFiniteError:
            # The run trained to its end: its summary, checkpoints and exit code stand.
            console.print(
                "no sampled continuation: the model's logits are not finite (its loss went to NaN or inf)"
            )
            return
        if prompt is not None:
            console.print(Text("sampled continuation (prompt, then the model's text):", style="bold"))
            console.print(Text.assemble((prompt, "cyan"), continuation))


def _sharded(model: Any) -> bool:
    """Whether ``model`` holds DTensor parameters (FSDP2 or tensor parallelism)."""
    parameters = getattr(model, "parameters", None)
    return callable(parameters) and any(type(p).__name__ == "DTensor" for p in parameters())


def sample_continuation(
    model: Any, datamodule: Any, prompt_words: int = 6, new_tokens: int = 60
) -> tuple[Any, str]:
    """The first words of a validation document and the model's sampled continuation of them (seeded).

    The document is the first of the validation split whose first line has at least
    ``prompt_words`` words (a sentence rather than a title), so the prompt ends on a word boundary.

    Returns:
        ``(prompt text, continuation text)``, or ``(None, "")`` when the datamodule has no
        tokenizer or documents, or the model cannot generate.

    Raises:
        NotFiniteError: the model's logits are NaN or infinite (its loss diverged).
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


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _pair(stats: dict[str, Any], train: str, val: str) -> str | None:
    if train not in stats and val not in stats:
        return None
    return f"{_count(stats.get(train, '?'))} train / {_count(stats.get(val, '?'))} val"


def _tokenizer_figure(params: dict[str, Any], stats: dict[str, Any]) -> str | None:
    size = stats.get("vocab_size")
    sized = f"{_count(size)} tokens" if size is not None else "its tokens"
    if params.get("source") == "supplied":
        digest = str(params.get("xxh3") or "?")[:12]
        return (
            f"supplied {params.get('tokenizer_file') or params.get('tokenizer') or 'tokenizer file'} (content hash {digest}), {sized}; "
            "trained elsewhere: it learned nothing from this run's splits"
        )
    if params.get("source") == "trained":
        sample = stats.get("sample_documents", stats.get("rows", "?"))
        return (
            f"{params.get('tokenizer', 'tokenizer')} of {sized}, trained on {_count(sample)} train documents"
        )
    return None


def lm_figures(ledger: StepLedger) -> list[tuple[str, str]]:
    """What an LLM engineer reads off an LM ledger, as ``(label, text)`` rows, from its steps' stats.

    Documents through load, clean and dedup and per split, the exact and near-duplicates removed,
    the tokenizer (trained on the train split, or supplied and identified by its content hash),
    tokens per split, end-of-text tokens and their rate, blocks and the tokens dropped by packing.
    A figure whose statistics the ledger lacks (a hand-written pipeline records fewer) is left out.
    """
    stats = {r.step: dict(r.stats) for r in ledger}
    params = {r.step: dict(r.params) for r in ledger}
    rows: list[tuple[str, str]] = []
    counts = [
        f"{_count(stats[step]['rows'])} {label}"
        for step, label in (("load", "loaded"), ("clean", "after clean"), ("dedup", "after dedup"))
        if "rows" in stats.get(step, {})
    ]
    split = _pair(stats.get("split", {}), "train_rows", "val_rows")
    if counts or split:
        config = ledger.info.get("config") or {}
        cut = f" (text files cut by {config['sample_by']})" if config.get("dataset") == "text" else ""
        rows.append(("documents", "; ".join([*counts, *([split] if split else [])]) + cut))
    dedup = stats.get("dedup", {})
    if "exact_removed" in dedup or "near_removed" in dedup:
        threshold = params.get("dedup", {}).get("threshold")
        near = f" (Jaccard >= {threshold} on word shingles)" if threshold is not None else ""
        rows.append(
            (
                "duplicates removed",
                f"{_count(dedup.get('exact_removed', 0))} exact, {_count(dedup.get('near_removed', 0))} near{near}, "
                "before the split",
            )
        )
    tokenizer = _tokenizer_figure(params.get("build_vocab", {}), stats.get("build_vocab", {}))
    if tokenizer:
        rows.append(("tokenizer", tokenizer))
    encode, pack = stats.get("encode", {}), stats.get("pack", {})
    tokens = _pair(encode, "train_tokens", "val_tokens")
    if tokens:
        rows.append(("tokens", tokens))
    if "eos_tokens" in encode or "eos_rate" in pack:
        parts = []
        if "eos_tokens" in encode:
            parts.append(
                f"{_count(encode['eos_tokens'])} tokens for {_count(encode.get('documents', '?'))} documents"
            )
        if "eos_rate" in pack:
            parts.append(f"{float(pack['eos_rate']):.2%} of the train blocks' tokens")
        rows.append(("end-of-text", "; ".join(parts)))
    blocks = _pair(pack, "train_blocks", "val_blocks")
    if blocks:
        block_size = params.get("pack", {}).get("block_size")
        rows.append(("blocks", blocks + (f" of {block_size} + 1 tokens" if block_size is not None else "")))
    dropped = _pair(pack, "train_dropped_tokens", "val_dropped_tokens")
    if dropped:
        rows.append(
            (
                "dropped tokens",
                dropped + " (partial documents where tails join; the last tail shorter than a block)",
            )
        )
    if isinstance(pack.get("mixture"), dict):
        from lightning_order.data.lm.mixture import mixture_figure

        rows.append(("mixture", mixture_figure(pack["mixture"])))
    return rows

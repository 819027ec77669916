"""``build_vocab`` for language modelling: the tokenizer's sample, its training, or a supplied tokenizer checked.

The sample is deterministic and capped: every train document gets a seeded hash of its text;
documents are taken in hash order until ``tokenizer_train_bytes`` would be passed, and fed to the
trainer in partition order. The workers choose it (:mod:`.sampling`: a prefix in hash order per
file, merged on the driver within the cap, the chosen texts written by the workers); the driver
holds no hash or size per train document and reads only the sample back. It depends on the
documents alone (never on how many processes read them), and what it was is recorded: its
documents, bytes and fingerprint (the hashes taken, in order). A byte-level BPE's merges come from word counts, so the sample's order does not matter
to the result either.

A supplied ``tokenizer.json`` is read once and hashed from the same bytes, its truncation and
padding switched off (recorded), and its character loss on the sample measured: more than
:data:`~.tokenizer.MAX_CHARACTER_LOSS` of the characters lost (no unknown token and no byte
fallback) is refused.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult, train_data
from lightning_order.data.lm import sampling
from lightning_order.data.lm.bos import choose_bos, set_prompt_processor
from lightning_order.data.lm.config import AUTO, LMConfig, padded_size
from lightning_order.data.lm.registry import LM_STEPS, engine_of
from lightning_order.data.lm.tokenizer import (
    MAX_CHARACTER_LOSS,
    SuppliedTokenizer,
    character_loss,
    parse_tokenizer,
    read_tokenizer,
    train_byte_bpe,
    unknown_id,
)
from lightning_order.errors import DataError

__all__ = ["build_tokenizer", "build_vocab", "sample_threshold"]

#: Documents of the sample whose character loss is measured for a supplied tokenizer.
_LOSS_SAMPLE = 256


def sample_threshold(hashes: np.ndarray, sizes: np.ndarray, cap: int) -> tuple[int, int, int]:
    """The largest hash kept when documents are taken in hash order until ``cap`` bytes would be passed.

    Returns:
        ``(threshold, documents, bytes)``: documents with a hash at or below ``threshold`` form
        the sample (every one when the total is within ``cap``; at least one document).
    """
    if not len(hashes):
        return -1, 0, 0
    order = np.argsort(hashes, kind="stable")
    total = np.cumsum(sizes[order])
    taken = max(1, int(np.searchsorted(total, cap, side="right")))
    return int(hashes[order[taken - 1]]), taken, int(total[taken - 1])


def _read_supplied(cfg: LMConfig) -> SuppliedTokenizer:
    """The supplied tokenizer: ``tokenizer_file`` read now (its hash checked), or ``tokenizer``'s snapshot parsed."""
    if cfg.tokenizer_file is not None:
        return read_tokenizer(cfg.tokenizer_file, cfg.eos_token, digest=cfg.tokenizer_digest)
    found = cfg.tokenizer_source
    assert found is not None  # supplied_label said so
    return parse_tokenizer(found.text, found.digest, cfg.eos_token, found.label)


def _sample(cfg: Any, source: Any, engine: Any, work: Path) -> tuple[list[str], dict[str, Any]]:
    """The sample chosen on the workers (:mod:`.sampling`): its text files in file order, and its record.

    Raises:
        DataError: the train split holds no document.
    """
    cap = int(cfg.tokenizer_train_bytes)
    prefixes = [str(work / f"prefix-{i:05d}.npy") for i in range(source.count)]
    items = [{"documents": source, "file": i, "cap": cap, "out": prefixes[i]} for i in range(source.count)]
    found = engine.map(sampling.local_sample, items, weight=source.text_bytes, desc="tokenizer sample")
    threshold, documents, size = sampling.merged_threshold(prefixes, cap)
    if threshold < 0:
        raise DataError(
            "the tokenizer's sample is empty: the train split holds no document", step="build_vocab"
        )
    chosen = [i for i, r in enumerate(found) if r["least"] is not None and r["least"] <= threshold]
    paths = [str(work / f"sample-{i:05d}.arrow") for i in chosen]
    written = engine.map(
        sampling.sample_texts,
        [
            {"documents": source, "file": i, "prefix": prefixes[i], "threshold": threshold, "out": path}
            for i, path in zip(chosen, paths)
        ],
        # weighed by the files it reads, not the sample: a small sample of a large corpus still
        # reads every train file, which is the workers' work, not the driver's
        weight=source.text_bytes,
        desc="tokenizer sample texts",
    )
    record = {
        "sample_documents": documents,
        "sample_bytes": size,
        "sample_fingerprint": sampling.sample_digest(written),
        "rows": sum(r["rows"] for r in found),
    }
    return paths, record


def build_tokenizer(cfg: Any, source: Any, engine: Any, work: Path | None) -> tuple[Any, dict, dict]:
    """The tokenizer ``build_vocab`` records, with its ``params`` and ``stats`` (see the module docstring).

    Args:
        cfg: the :class:`~.config.LMConfig`.
        source: the documents it learns from (the train part's DocumentSet; the whole corpus
            before the split, a wrong order).
        engine: runs the per-file work: each file's prefix in hash order, the sampled texts.
        work: the scratch folder the sample's files are written to (``None``: a temporary one).

    Raises:
        DataError: the sample is empty, or a supplied tokenizer loses characters.
    """
    with tempfile.TemporaryDirectory(dir=work) as folder:
        return _build_tokenizer(cfg, source, engine, Path(folder))


def _build_tokenizer(cfg: Any, source: Any, engine: Any, work: Path) -> tuple[Any, dict, dict]:
    paths, sample = _sample(cfg, source, engine, work)
    label = cfg.supplied_label
    if label is not None:
        supplied = _read_supplied(cfg)
        probe = [t for _, t in zip(range(_LOSS_SAMPLE), sampling.sampled_texts(paths))]
        lost, total = character_loss(supplied.tokenizer, probe)
        if total and lost / total > MAX_CHARACTER_LOSS:
            raise DataError(
                f"{label} cannot encode {lost} of {total} characters of "
                f"{len(probe)} train documents ({lost / total:.2%}; it has no unknown token and no byte "
                "fallback, so they would vanish from the data): use a tokenizer that covers the text "
                "(a byte-level BPE, or one with byte_fallback), or tokenizer_file=None to train one",
                step="build_vocab",
            )
        params = {"source": "supplied", "xxh3": supplied.digest, "switched_off": list(supplied.switched_off)}
        if cfg.tokenizer_file is not None:
            params["tokenizer_file"] = str(cfg.tokenizer_file)
        else:
            given = cfg.tokenizer_source
            if given is not None:
                params.update(tokenizer=given.name, tokenizer_kind=given.kind, declared=dict(given.special))
        return supplied.tokenizer, params, {**sample, "character_loss": lost / total if total else 0.0}
    start, cpu = time.perf_counter(), time.process_time()  # the step's one serial part: the driver trains
    tokenizer = train_byte_bpe(
        sampling.sampled_texts(paths),
        cfg.vocab_size,
        eos_token=cfg.eos_token,
        length=sample["sample_documents"],
        bos_token=cfg.bos_token if cfg.bos_token != AUTO else None,
    )
    params = {
        "source": "trained",
        "vocab_size": cfg.vocab_size,
        "tokenizer": "byte-level-bpe",
        "tokenizer_train_bytes": cfg.tokenizer_train_bytes,
    }
    timing = {
        "train_seconds": round(time.perf_counter() - start, 4),
        "train_cpu_seconds": round(time.process_time() - cpu, 4),  # every thread of the trainer
    }
    return tokenizer, params, {**sample, **timing}


def hf_special_tokens(cfg: LMConfig, tokenizer: Any, bos_token: str | None) -> dict[str, str]:
    """The special tokens a Hugging Face tokenizer of the data declares: eos, bos, pad, unk (those it has).

    ``pad_token`` is the supplied folder's or object's own when it declares one the tokenizer
    holds, else the end-of-text token (no new row: the blocks hold no padding); ``unk_token`` the
    model's unknown token, if any.
    """
    found = {"eos_token": cfg.eos_token}
    if bos_token is not None:
        found["bos_token"] = bos_token
    declared = cfg.tokenizer_source.special if cfg.tokenizer_source is not None else {}
    pad = declared.get("pad_token")
    found["pad_token"] = pad if pad is not None and tokenizer.token_to_id(pad) is not None else cfg.eos_token
    unk = unknown_id(tokenizer)
    if unk is not None:
        found["unk_token"] = tokenizer.id_to_token(unk)
    return found


@LM_STEPS.register(
    "build_vocab",
    takes=ROWS,
    provides=("tokenizer",),
    consumes=("clean",),
    reads="train",
    config=(
        "vocab_size",
        "tokenizer_file",
        "tokenizer",
        "eos_token",
        "bos_token",
        "pad_vocab_multiple",
        "tokenizer_train_bytes",
    ),
    output="content",  # the tokenizer's fingerprint: the validator compares it with the one in use
)
def build_vocab(ctx: StepContext, state: DataState) -> StepResult:
    """Trains the byte-level BPE on a hash-sample of the train documents, or reads ``tokenizer_file``."""
    cfg: LMConfig = ctx.config
    tokenizer, params, stats = build_tokenizer(cfg, train_data(state), engine_of(ctx), ctx.work)
    # One decision for a document's start, recorded: the blocks and the tokenizer users get agree.
    bos = choose_bos(
        cfg.bos_token,
        tokenizer,
        cfg.tokenizer_source,
        cfg.supplied_label or "the trained tokenizer",
        eos_token=cfg.eos_token,
    )
    set_prompt_processor(tokenizer, bos)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    params.update(pad_vocab_multiple=cfg.pad_vocab_multiple, bos_token=bos.token, bos_source=bos.origin)
    stats.update(
        vocab_size=size,
        padded_vocab_size=padded_size(size, cfg.pad_vocab_multiple),
        eos_id=tokenizer.token_to_id(cfg.eos_token),
        bos_id=bos.id,
        special_tokens=[cfg.eos_token, *([bos.token] if bos.token else [])],
        hf_special_tokens=hf_special_tokens(cfg, tokenizer, bos.token),
    )
    from lightning_order.fingerprints import tokenizer_fingerprint

    return StepResult(
        replace(state, tokenizer=tokenizer),
        tokenizer_fingerprint(tokenizer),
        params=params,
        stats=stats,
        learned=params["source"] == "trained",  # a supplied tokenizer learned from nothing here
    )

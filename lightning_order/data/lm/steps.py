"""The causal language-modelling steps (:data:`LM_STEPS`), registered for the one step runner.

``load → clean → dedup → split → build_vocab → encode → pack`` run in ``prepare_data``, ``shard``
in ``setup`` on every rank (DESIGN.md §1b). Documents are held as Python lists of strings up to
``encode``; the tokenizer lives in :mod:`.tokenizer`, the token streams and blocks in
:mod:`.blocks`, deduplication in :mod:`.dedup`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from lightning_order.data.engine.keys import is_val
from lightning_order.data.engine.loading import load_files
from lightning_order.data.engine.runner import (
    ROWS,
    DataState,
    StepContext,
    StepRegistry,
    StepResult,
    train_data,
)
from lightning_order.data.lm.blocks import encode_documents, pack_stream, stride_shard
from lightning_order.data.lm.config import EOS_TOKEN, LM_CODE_VERSION, LMConfig, padded_size
from lightning_order.data.lm.tokenizer import read_tokenizer, train_byte_bpe
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["LM_STEPS", "clean_document"]

#: The registry of the LM steps (:class:`~lightning_order.OrderedLMDataModule`).
LM_STEPS = StepRegistry()
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_TRAILING = re.compile(r"[ \t]+\n")
_BLANK_LINES = re.compile(r"\n{3,}")


# -- load, clean -----------------------------------------------------------------------------
@LM_STEPS.register("load", takes=frozenset({None}), makes="rows", reads="none", writes_data=True)
def load(ctx: StepContext, state: DataState) -> StepResult:
    """Reads the documents: the standard library's documentation, or ``text_column`` of a dataset."""
    cfg: LMConfig = ctx.config
    if cfg.dataset is None:
        from lightning_order.data.lm.corpus import stdlib_corpus

        docs = list(stdlib_corpus(cfg.max_documents))
    else:
        docs = _dataset_documents(cfg, None if ctx.work is None else ctx.work / "hf")
    from lightning_order.data.lm.corpus import corpus_fingerprint

    corpus = corpus_fingerprint(docs)
    fp = fingerprint("lm-load", LM_CODE_VERSION, cfg.load_identity(), corpus)
    return StepResult(
        replace(state, data=docs),
        fp,
        params={"dataset": cfg.dataset or "stdlib-docs", "corpus": corpus},
        stats={"rows": len(docs), "chars": sum(map(len, docs))},
    )


def _dataset_documents(cfg: LMConfig, hf_cache: Path | None) -> list[str]:
    data = load_files(cfg, hf_cache)
    if cfg.text_column not in data.column_names:
        raise DataError(
            f"the text column is not in the data (columns: {', '.join(data.column_names)}); set text_column",
            step="load",
            column=cfg.text_column,
        )
    if cfg.max_documents is not None:
        data = data.select(range(min(len(data), cfg.max_documents)))
    docs = data[cfg.text_column]
    bad = next((d for d in docs if not isinstance(d, str)), None) if docs else None
    if not docs or bad is not None:
        what = "the dataset is empty" if not docs else f"a row holds {type(bad).__name__}, not text"
        raise DataError(
            f"{what}; set text_column to the column that holds the text", step="load", column=cfg.text_column
        )
    return docs


def clean_document(text: str) -> str:
    """One document cleaned for language modelling: line structure kept (code and lists read as such).

    Unicode NFKC, control characters dropped, the end-of-text marker removed from the text (only
    ``encode`` may place it), trailing spaces stripped, three or more line breaks made two.
    """
    text = unicodedata.normalize("NFKC", text).replace(EOS_TOKEN, " ")
    text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = _BLANK_LINES.sub("\n\n", _TRAILING.sub("\n", text))
    return text.strip()


def _clean_all(docs: Sequence[str]) -> list[str]:
    return [c for c in (clean_document(d) for d in docs) if c]


@LM_STEPS.register("clean", takes=ROWS, reads="data", writes_data=True)
def clean(ctx: StepContext, state: DataState) -> StepResult:
    """Cleans every document (:func:`clean_document`); documents empty afterwards are dropped and counted."""
    fp = fingerprint("lm-clean", LM_CODE_VERSION, dict(ctx.inputs))
    before = state.rows()
    if state.parts:
        parts = {name: _clean_all(docs) for name, docs in state.parts.items()}
        part_fps = {name: fingerprint(fp, name) for name in parts}
        state = replace(state, parts=parts, part_fps=part_fps)
    else:
        state = replace(state, data=_clean_all(state.data))
    if state.rows() == 0 or any(len(p) == 0 for p in state.parts.values()):
        raise DataError(
            "no document is left after cleaning (every one was empty or whitespace); check text_column",
            step="clean",
        )
    return StepResult(
        state,
        fp,
        parts=dict(state.part_fps),
        stats={"rows": state.rows(), "dropped_empty": before - state.rows()},
    )


# -- dedup, split ----------------------------------------------------------------------------
@LM_STEPS.register("dedup", takes=ROWS, reads="data", writes_data=True)
def dedup(ctx: StepContext, state: DataState) -> StepResult:
    """Removes exact and MinHash near-duplicates (``dedup_threshold``) from the whole cleaned corpus.

    Run after the split (a wrong order, ``enforce=False``), it can only deduplicate within each
    part: the near-duplicate pairs left straddling the split are counted (``straddling``).
    """
    from lightning_order.data.lm.dedup import deduplicate, straddling_pairs

    cfg: LMConfig = ctx.config
    params = {"threshold": cfg.dedup_threshold, "ngram": 5, "num_perm": 128}
    fp = fingerprint("lm-dedup", LM_CODE_VERSION, dict(ctx.inputs), params)
    stats: dict[str, Any] = {"exact_removed": 0, "near_removed": 0}
    if not state.parts:
        result = deduplicate(state.data, threshold=cfg.dedup_threshold, seed=cfg.seed)
        kept = [state.data[i] for i in result.keep.tolist()]
        stats.update(exact_removed=result.exact_removed, near_removed=result.near_removed, rows=len(kept))
        return StepResult(replace(state, data=kept), fp, params=params, stats=stats)
    parts = {}
    for name, docs in state.parts.items():
        result = deduplicate(docs, threshold=cfg.dedup_threshold, seed=cfg.seed)
        parts[name] = [docs[i] for i in result.keep.tolist()]
        stats["exact_removed"] += result.exact_removed
        stats["near_removed"] += result.near_removed
    pairs = straddling_pairs(parts.get("train", []), parts.get("val", []), threshold=cfg.dedup_threshold)
    stats.update(rows=sum(map(len, parts.values())), straddling=len(pairs))
    part_fps = {name: fingerprint(fp, name) for name in parts}
    return StepResult(
        replace(state, parts=parts, part_fps=part_fps), fp, parts=part_fps, params=params, stats=stats
    )


@LM_STEPS.register("split", takes=ROWS, reads="data", writes_data=True, partitions=("train", "val"))
def split(ctx: StepContext, state: DataState) -> StepResult:
    """Train/validation by a hash of each document's word sequence (stable as the corpus grows)."""
    cfg: LMConfig = ctx.config
    docs = state.data
    flag = is_val(docs, cfg.val_fraction, cfg.seed, text=True)
    params = {"val_fraction": cfg.val_fraction, "seed": cfg.seed, "key": "document"}
    fp = fingerprint("lm-split", LM_CODE_VERSION, dict(ctx.inputs), params)
    digest = fingerprint(fp, np.packbits(flag).tobytes().hex())
    parts = {"train": [d for d, v in zip(docs, flag) if not v], "val": [d for d, v in zip(docs, flag) if v]}
    for name, part in parts.items():
        if not part:
            raise DataError(
                f"the {name} split is empty ({len(docs)} documents, val_fraction={cfg.val_fraction}); "
                "use more documents or another val_fraction",
                step="split",
            )
    part_fps = {name: fingerprint(digest, name) for name in parts}
    return StepResult(
        replace(state, data=None, parts=parts, part_fps=part_fps),
        fp,
        parts=part_fps,
        params=params,
        stats={"train_rows": len(parts["train"]), "val_rows": len(parts["val"])},
    )


# -- build_vocab -----------------------------------------------------------------------------
@LM_STEPS.register("build_vocab", takes=ROWS, consumes=("clean",), reads="train")
def build_vocab(ctx: StepContext, state: DataState) -> StepResult:
    """Trains the byte-level BPE on the (cleaned train) documents, or reads ``tokenizer_file``."""
    cfg: LMConfig = ctx.config
    source = train_data(state)
    if cfg.tokenizer_file is not None:
        tokenizer = read_tokenizer(cfg.tokenizer_file)
        params: dict[str, Any] = {"tokenizer_file": str(cfg.tokenizer_file), "xxh3": cfg.tokenizer_digest}
    else:
        tokenizer = train_byte_bpe(source, cfg.vocab_size)
        params = {"vocab_size": cfg.vocab_size, "tokenizer": "byte-level-bpe"}
    size = tokenizer.get_vocab_size()
    params["pad_vocab_multiple"] = cfg.pad_vocab_multiple
    return StepResult(
        replace(state, tokenizer=tokenizer),
        fingerprint("vocab", tokenizer.to_str()),
        params=params,
        stats={
            "vocab_size": size,
            "padded_vocab_size": padded_size(size, cfg.pad_vocab_multiple),
            "eos_id": tokenizer.token_to_id(EOS_TOKEN),
            "special_tokens": [EOS_TOKEN],
            "rows": len(source),
        },
    )


# -- encode, pack, shard ---------------------------------------------------------------------
@LM_STEPS.register(
    "encode",
    takes=ROWS,
    makes="encoded",
    needs=("split", "build_vocab"),
    after=("clean", "dedup"),
    consumes=("build_vocab",),
    reads="data",
)
def encode(ctx: StepContext, state: DataState) -> StepResult:
    """Token ids per document, exactly one end-of-text id after each (``eos=False``: none, a wrong order)."""
    cfg: LMConfig = ctx.config
    eos_id = state.tokenizer.token_to_id(EOS_TOKEN) if cfg.eos else None
    fp = fingerprint("lm-encode", LM_CODE_VERSION, dict(ctx.inputs), cfg.eos, dict(state.part_fps))
    streams = {name: encode_documents(state.tokenizer, docs, eos_id) for name, docs in state.parts.items()}
    part_fps = {name: fingerprint(fp, name) for name in streams}
    eos_count = sum(int((s.ids == eos_id).sum()) if eos_id is not None else 0 for s in streams.values())
    documents = {name: list(docs) for name, docs in state.parts.items()}
    stats = {f"{n}_tokens": len(s.ids) for n, s in streams.items()}
    stats.update(documents=sum(map(len, streams.values())), eos_tokens=eos_count)
    return StepResult(
        replace(state, parts=streams, part_fps=part_fps, extra={**state.extra, "documents": documents}),
        fp,
        parts=part_fps,
        params={"eos": cfg.eos, "eos_token": EOS_TOKEN},
        stats=stats,
    )


@LM_STEPS.register(
    "pack",
    takes=frozenset({"encoded"}),
    makes="packed",
    needs=("encode",),
    consumes=("encode",),
    reads="none",
    writes_data=True,
)
def pack(ctx: StepContext, state: DataState) -> StepResult:
    """Blocks of ``block_size + 1`` tokens per split (inputs and labels shifted by one), no padding."""
    cfg: LMConfig = ctx.config
    fp = fingerprint("lm-pack", LM_CODE_VERSION, dict(ctx.inputs), cfg.block_size)
    blocks, stats = {}, {}
    eos_id = state.tokenizer.token_to_id(EOS_TOKEN) if state.tokenizer is not None else None
    for name, stream in state.parts.items():
        blocks[name], dropped = pack_stream(stream.ids, cfg.block_size)
        if len(blocks[name]) == 0:
            raise DataError(
                f"block_size={cfg.block_size} cannot be filled: the {name} split holds {len(stream.ids)} tokens, "
                f"fewer than one block of block_size + 1 = {cfg.block_size + 1}; lower block_size, or use more "
                "documents (or a larger val_fraction)",
                step="pack",
            )
        stats[f"{name}_blocks"] = len(blocks[name])
        stats[f"{name}_dropped_tokens"] = dropped
        eos_in = int((blocks[name] == eos_id).sum()) if eos_id is not None else 0
        stats[f"{name}_eos_tokens"] = eos_in
    train_tokens = blocks["train"].size if "train" in blocks else 0
    stats["eos_rate"] = stats.get("train_eos_tokens", 0) / train_tokens if train_tokens else 0.0
    part_fps = {name: fingerprint(fp, name) for name in blocks}
    return StepResult(
        replace(state, parts=blocks, part_fps=part_fps),
        fp,
        parts=part_fps,
        params={"block_size": cfg.block_size, "padding": False},
        stats=stats,
    )


@LM_STEPS.register(
    "shard",
    takes=frozenset({"packed"}),
    makes="shard",
    needs=("pack",),
    consumes=("pack",),
    reads="none",
    writes_data=True,
    per_rank=True,
)
def shard(ctx: StepContext, state: DataState) -> StepResult:
    """(In ``setup``, on every rank) this rank's blocks: every ``world_size``-th, equal counts on all ranks."""
    train = state.parts["train"]
    index, dropped = stride_shard(len(train), ctx.world_size, ctx.rank)
    return StepResult(
        replace(state, parts={**state.parts, "train": train[index]}),
        fingerprint("lm-shard", ctx.inputs["pack"], ctx.rank, ctx.world_size),
        params={"layout": "strided"},
        stats={"length": len(index), "world_size": ctx.world_size, "dropped": dropped, "start": ctx.rank},
    )

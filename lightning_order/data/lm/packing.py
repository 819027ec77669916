"""The LM steps from documents to blocks: ``encode``, ``pack`` (both per partition) and ``shard`` (per rank).

``encode`` writes each partition's token ids (one end-of-text after each document) as an int32
``.npy``; ``pack`` cuts each partition's stream into blocks of ``block_size + 1`` written straight
into their rows of one shared block file, then joins the partitions' tails in partition order
into the last blocks and drops what is left of them (recorded); ``shard`` (in ``setup``) gives
every rank its part of every global batch of the global block order (equal counts on every rank,
:mod:`lightning_order.data.engine.sharding`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.engine.sharding import plan_shard
from lightning_order.data.engine.storage import allocate_array
from lightning_order.data.lm import tasks
from lightning_order.data.lm.blocks import stride_shard
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import LM_STEPS, engine_of, scratch
from lightning_order.data.lm.tokenizer import check_encode_loss
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["BlockFile", "BlockView", "TokenFiles", "encode", "pack", "shard"]


@dataclass(frozen=True)
class TokenFiles:
    """One part encoded: an int32 ``.npy`` of token ids per file of its documents, in partition order."""

    paths: tuple[str, ...]
    tokens: tuple[int, ...]
    documents: int

    def __len__(self) -> int:
        return self.documents


@dataclass(frozen=True)
class BlockFile:
    """One part packed: an ``n × width`` int32 ``.npy`` of blocks (memory-mapped when read)."""

    path: str
    rows: int
    width: int

    def __len__(self) -> int:
        return self.rows

    def array(self) -> np.ndarray:
        """The blocks, memory-mapped."""
        return np.load(self.path, mmap_mode="r")


def _encode_loss(cfg: LMConfig, name: str, results: list[dict], documents: int) -> dict[str, Any]:
    """A split's encode loss (``{name}_lost_characters``, ...), refused past the threshold (a supplied tokenizer)."""
    found = {
        key: sum(r[key] for r in results) for key in ("lost_characters", "characters", "empty_documents")
    }
    if cfg.tokenizer_file is not None:
        check_encode_loss(cfg.tokenizer_file, name, {**found, "documents": documents})
    rate = found["lost_characters"] / found["characters"] if found["characters"] else 0.0
    return {**{f"{name}_{key}": value for key, value in found.items()}, f"{name}_character_loss": rate}


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
    """Token ids per partition, exactly one end-of-text id after each document (``eos=False``: none, a wrong order)."""
    cfg: LMConfig = ctx.config
    eos_id = state.tokenizer.token_to_id(cfg.eos_token) if cfg.eos else None
    folder = scratch(ctx, "encode")
    tokenizer_path = folder / "tokenizer.json"
    state.tokenizer.save(str(tokenizer_path))
    size = state.tokenizer.get_vocab_size(with_added_tokens=True)
    streams, stats, digests = {}, {"documents": 0, "eos_tokens": 0}, []
    for name, docs in state.parts.items():
        items = [
            {
                "documents": docs,
                "file": p,
                "tokenizer": str(tokenizer_path),
                "eos_id": eos_id,
                "vocab_size": size,
                "out": str(folder / name / f"part-{p:05d}.npy"),
                "part": name,
                "measure_loss": cfg.tokenizer_file is not None,  # a trained byte-level BPE loses nothing
            }
            for p in range(docs.count)
        ]
        results = engine_of(ctx).map(
            tasks.encode_partition, items, weight=docs.text_bytes, desc=f"encode {name}"
        )
        streams[name] = TokenFiles(
            tuple(i["out"] for i in items),
            tuple(r["tokens"] for r in results),
            sum(r["documents"] for r in results),
        )
        stats[f"{name}_tokens"] = sum(r["tokens"] for r in results)
        stats["documents"] += streams[name].documents
        stats["eos_tokens"] += sum(r["eos_tokens"] for r in results)
        stats.update(_encode_loss(cfg, name, results, streams[name].documents))
        digests.append([r["digest"] for r in results])
    fp = fingerprint("lm-encode", LM_CODE_VERSION, dict(ctx.inputs), cfg.eos, dict(state.part_fps), digests)
    part_fps = {name: fingerprint(fp, name) for name in streams}
    return StepResult(
        replace(
            state, parts=streams, part_fps=part_fps, extra={**state.extra, "documents": dict(state.parts)}
        ),
        fp,
        parts=part_fps,
        params={"eos": cfg.eos, "eos_token": cfg.eos_token, "special_tokens_in_text": "split"},
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
    """Blocks of ``block_size + 1`` tokens per partition, then the partitions' tails in order; no padding."""
    cfg: LMConfig = ctx.config
    width = cfg.block_size + 1
    eos_id = state.tokenizer.token_to_id(cfg.eos_token) if state.tokenizer is not None else None
    fp = fingerprint("lm-pack", LM_CODE_VERSION, dict(ctx.inputs), cfg.block_size)
    folder = scratch(ctx, "pack")
    blocks, stats = {}, {}
    for name, stream in state.parts.items():
        whole = [t // width for t in stream.tokens]
        tails = sum(t % width for t in stream.tokens)
        rows = sum(whole) + tails // width
        if rows == 0:
            raise DataError(
                f"block_size={cfg.block_size} cannot be filled: the {name} split holds {sum(stream.tokens)} tokens, "
                f"fewer than one block of block_size + 1 = {width}; lower block_size, or use more documents (or a "
                "larger val_fraction)",
                step="pack",
            )
        path = folder / name / "blocks.npy"
        path.parent.mkdir(parents=True)
        allocate_array(path, (rows, width), np.int32)  # on disk now: a full disk is ENOSPC, never a SIGBUS
        offsets = np.concatenate([[0], np.cumsum(whole)]).tolist()
        items = [
            {
                "tokens": stream.paths[i],
                "blocks": str(path),
                "offset": offsets[i],
                "width": width,
                "eos_id": eos_id,
            }
            for i in range(len(stream.paths))
        ]
        packed = engine_of(ctx).map(tasks.pack_partition, items, desc=f"pack {name}")
        tail = np.concatenate([np.empty(0, dtype=np.int32), *(p["tail"] for p in packed)])
        count = len(tail) // width
        eos = sum(p["eos"] for p in packed)
        if count:
            out = np.load(path, mmap_mode="r+")
            out[offsets[-1] : offsets[-1] + count] = tail[: count * width].reshape(count, width)
            out.flush()
            del out
            eos += int(np.count_nonzero(tail[: count * width] == eos_id)) if eos_id is not None else 0
        blocks[name] = BlockFile(str(path), rows, width)
        stats[f"{name}_blocks"] = rows
        stats[f"{name}_dropped_tokens"] = int(len(tail) - count * width)
        stats[f"{name}_eos_tokens"] = eos  # 0 without end-of-text: the workers counted none
    train_tokens = blocks["train"].rows * width if "train" in blocks else 0
    stats["eos_rate"] = stats.get("train_eos_tokens", 0) / train_tokens if train_tokens else 0.0
    part_fps = {name: fingerprint(fp, name) for name in blocks}
    return StepResult(
        replace(state, parts=blocks, part_fps=part_fps),
        fp,
        parts=part_fps,
        params={"block_size": cfg.block_size, "padding": False, "tails": "carried, then dropped"},
        stats=stats,
    )


@dataclass(frozen=True)
class BlockView:
    """Some blocks of a block array: rows ``index`` of ``blocks`` (no copy until a batch is read)."""

    blocks: Any
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self.blocks[self.index])
        return out if dtype is None else out.astype(dtype)


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
    """(In ``setup``, on every rank) this rank's part of every global batch of the global block order.

    The loader reads the whole block file by index (``extra["served"]``); the rank's ``train``
    part is the blocks it reads in the first epoch (equal counts on every rank).
    """
    train = state.parts["train"]
    if len(train) < ctx.world_size:  # the message of earlier versions, which users match on
        stride_shard(len(train), ctx.world_size, ctx.rank)
    plan = plan_shard(ctx, len(train), ctx.inputs["pack"], name="lm-shard", what="blocks")
    extra = {**state.extra, "served": train, "global_order": plan.order}
    return StepResult(
        replace(
            state, parts={**state.parts, "train": BlockView(train, plan.order.rank_indices(0))}, extra=extra
        ),
        plan.output,
        params=plan.params,
        stats=plan.stats,
    )

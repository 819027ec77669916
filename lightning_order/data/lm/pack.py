"""The LM step ``pack``: each partition's token stream cut into blocks of ``block_size + 1``.

Each task writes its partition's whole blocks into a shard file of its own
(:mod:`~lightning_order.data.lm.block_shards`); then the partitions' tails are joined in partition
order into one more shard (per source, after its partitions') and what is left of them is dropped
(recorded). No padding. The index of the shards (file, block count) is what the step hands on.

A tail begins with the rest of the document its partition's last block cut (unless that block
ended with an end-of-text). Joined after another tail, that fragment would follow an end-of-text
as if a document started there, with no BOS and, under ``document_attention``, position 0: so
each tail after the first of a join starts at its first document start, the fragment dropped
(counted in ``<split>_fragment_tokens``, part of ``<split>_dropped_tokens``). The first tail's
fragment opens the tail shard, a row start like any other block's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lightning_order.data.engine.runner import DataState, StepContext, StepResult
from lightning_order.data.lm import tasks
from lightning_order.data.lm.block_shards import ShardedBlocks, write_index, write_shard
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.mixture import mixture_record
from lightning_order.data.lm.registry import LM_STEPS, engine_of, scratch
from lightning_order.errors import DataError
from lightning_order.ledger import fingerprint

__all__ = ["pack"]


@LM_STEPS.register(
    "pack",
    takes=frozenset({"encoded"}),
    makes="packed",
    consumes=("encode",),
    reads="none",
    writes_data=True,
    config=("block_size", "eos_token", "sources", "seed"),
)
def pack(ctx: StepContext, state: DataState) -> StepResult:
    """Blocks of ``block_size + 1`` tokens per partition, then the partitions' tails in order (see the module); no padding."""
    cfg: LMConfig = ctx.config
    eos_id = state.tokenizer.token_to_id(cfg.eos_token) if state.tokenizer is not None else None
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION)
    folder = scratch(ctx, "pack")
    blocks, stats = {}, {}
    sources = len(cfg.source_list) or 1
    for name, stream in state.parts.items():
        # a mixture's files are source by source (split.py): each source's blocks and tail apart
        if sources > 1 and len(stream.paths) != state.extra.get("source_files"):
            raise DataError(
                f"the {name} split's files no longer hold each source apart (a step re-partitioned the documents "
                "after split): a mixture packs per source; run clean and dedup before split (the mandated order)",
                step="pack",
            )
        per = len(stream.paths) // sources
        groups = [range(s * per, (s + 1) * per) for s in range(sources)]
        whole = [t // (cfg.block_size + 1) for t in stream.tokens]
        # at most the blocks packed: a tail's fragment is dropped only after a partition's whole
        # block, so with no whole block this is exactly the count, and otherwise it is not 0
        if sum(whole) + sum(t % (cfg.block_size + 1) for t in stream.tokens) // (cfg.block_size + 1) == 0:
            raise DataError(
                f"block_size={cfg.block_size} cannot be filled: the {name} split holds {sum(stream.tokens)} tokens, "
                f"fewer than one block of block_size + 1 = {cfg.block_size + 1}; lower block_size, or use more documents (or a "
                "larger val_fraction)",
                step="pack",
            )
        out = folder / name / "blocks"
        out.mkdir(parents=True)
        items = [
            tasks.PackItem(str(stream.paths[i]), str(out / f"part-{i:05d}.npy"), cfg.block_size, eos_id)
            for i in range(len(stream.paths))
        ]
        packed = engine_of(ctx).map(tasks.pack_partition, items, desc=f"pack {name}")
        eos, dropped, fragments = sum(p["eos"] for p in packed), 0, 0
        shards: list[tuple[str, int]] = []
        group_rows = []
        for s, g in enumerate(groups):
            # the source's shards in partition order, then its joined tails: the order of one block file
            shards.extend((f"part-{i:05d}.npy", whole[i]) for i in g if whole[i])
            joined: list[np.ndarray] = []
            for i in g:
                tail = packed[i]["tail"]
                # joined after an end-of-text, a tail starts at its first document start
                lead = packed[i]["lead"] if joined else 0
                fragments += lead
                if len(tail) > lead:
                    joined.append(tail[lead:])
            tail = np.concatenate([np.empty(0, dtype=np.int32), *joined])
            count = len(tail) // (cfg.block_size + 1)
            end = count * (cfg.block_size + 1)  # where the tail's whole blocks end
            if count:
                write_shard(out / f"tail-{s:03d}.npy", tail[:end].reshape(count, -1))
                shards.append((f"tail-{s:03d}.npy", count))
                eos += int(np.count_nonzero(tail[:end] == eos_id)) if eos_id is not None else 0
            dropped += int(len(tail) - end)
            group_rows.append(sum(whole[i] for i in g) + count)
        write_index(out, shards)  # the blocks' width is read from the shards written: the data's own
        blocks[name] = ShardedBlocks.open(out)
        stats[f"{name}_blocks"] = sum(group_rows)
        stats[f"{name}_dropped_tokens"] = dropped + fragments
        stats[f"{name}_fragment_tokens"] = fragments
        stats[f"{name}_eos_tokens"] = eos  # 0 without end-of-text: the workers counted none
        if sources > 1:
            stats[f"{name}_source_blocks"] = group_rows
            stats[f"{name}_source_tokens"] = [sum(stream.tokens[i] for i in g) for g in groups]
    train_tokens = len(blocks["train"]) * blocks["train"].width if "train" in blocks else 0
    stats["eos_rate"] = stats.get("train_eos_tokens", 0) / train_tokens if train_tokens else 0.0
    if sources > 1 and "train" in blocks:
        tokens = {name: stats[f"{name}_source_tokens"] for name in blocks}
        stats["mixture"] = mixture_record(
            cfg.source_list,
            tokens,
            stats["train_source_blocks"],
            cfg.block_size,
            cfg.seed,
            cfg.mixture_tolerance,
        )
    part_fps = {name: fingerprint(fp, name) for name in blocks}
    return StepResult(
        replace(state, parts=blocks, part_fps=part_fps),
        fp,
        parts=part_fps,
        params={
            "block_size": cfg.block_size,
            "padding": False,
            "tails": "carried from document starts, then dropped",
        },
        stats=stats,
    )

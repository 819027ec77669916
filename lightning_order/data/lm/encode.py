"""The LM step ``encode``: each partition's token ids, the BOS (if any) before and one end-of-text after each document.

Each partition's documents are encoded by the tokenizer ``build_vocab`` made (per partition, on
the engine) and written as an int32 ``.npy`` (:class:`TokenFiles`); the characters a supplied
tokenizer cannot encode are counted and refused past a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lightning_order.data.engine.runner import ROWS, DataState, StepContext, StepResult
from lightning_order.data.lm import tasks
from lightning_order.data.lm.bos import added_by_post_processor
from lightning_order.data.lm.config import LM_CODE_VERSION, LMConfig
from lightning_order.data.lm.registry import LM_STEPS, engine_of, scratch
from lightning_order.data.lm.tokenizer import check_encode_loss
from lightning_order.ledger import fingerprint

__all__ = ["TokenFiles", "encode"]


@dataclass(frozen=True)
class TokenFiles:
    """One part encoded: an int32 ``.npy`` of token ids per file of its documents, in partition order."""

    paths: tuple[str, ...]
    tokens: tuple[int, ...]
    documents: int

    def __len__(self) -> int:
        return self.documents


def _encode_loss(cfg: LMConfig, name: str, results: list[dict], documents: int) -> dict[str, Any]:
    """A split's encode loss (``{name}_lost_characters``, ...), refused past the threshold (a supplied tokenizer)."""
    found = {
        key: sum(r[key] for r in results) for key in ("lost_characters", "characters", "empty_documents")
    }
    if cfg.supplied_label is not None:
        check_encode_loss(cfg.supplied_label, name, {**found, "documents": documents})
    rate = found["lost_characters"] / found["characters"] if found["characters"] else 0.0
    return {**{f"{name}_{key}": value for key, value in found.items()}, f"{name}_character_loss": rate}


@LM_STEPS.register(
    "encode",
    takes=ROWS,
    makes="encoded",
    uses=("parts", "tokenizer"),
    consumes=("build_vocab",),
    reads="data",
    config=("eos", "eos_token", "tokenizer_file", "tokenizer"),
)
def encode(ctx: StepContext, state: DataState) -> StepResult:
    """Token ids per partition, exactly one end-of-text id after each document (``eos=False``: none, a wrong order)."""
    cfg: LMConfig = ctx.config
    eos_id = state.tokenizer.token_to_id(cfg.eos_token) if cfg.eos else None
    # build_vocab recorded the BOS in the tokenizer itself: its post-processor adds exactly it.
    before, _ = added_by_post_processor(state.tokenizer)
    bos_id = before[0] if before else None
    bos_token = state.tokenizer.id_to_token(bos_id) if bos_id is not None else None
    folder = scratch(ctx, "encode")
    tokenizer_path = folder / "tokenizer.json"
    state.tokenizer.save(str(tokenizer_path))
    size = state.tokenizer.get_vocab_size(with_added_tokens=True)
    streams, stats, digests = {}, {"documents": 0, "eos_tokens": 0, "bos_tokens": 0}, []
    for name, docs in state.parts.items():
        items = [
            tasks.EncodeItem(
                documents=docs,
                file=p,
                tokenizer=str(tokenizer_path),
                eos_id=eos_id,
                bos_id=bos_id,
                vocab_size=size,
                out=str(folder / name / f"part-{p:05d}.npy"),
                part=name,
                measure_loss=cfg.supplied_label is not None,  # a trained byte-level BPE loses nothing
            )
            for p in range(docs.count)
        ]
        results = engine_of(ctx).map(
            tasks.encode_partition, items, weight=docs.text_bytes, desc=f"encode {name}"
        )
        streams[name] = TokenFiles(
            tuple(i.out for i in items),
            tuple(r["tokens"] for r in results),
            sum(r["documents"] for r in results),
        )
        stats[f"{name}_tokens"] = sum(r["tokens"] for r in results)
        stats["documents"] += streams[name].documents
        stats["eos_tokens"] += sum(r["eos_tokens"] for r in results)
        stats["bos_tokens"] += streams[name].documents if bos_id is not None else 0
        stats.update(_encode_loss(cfg, name, results, streams[name].documents))
        digests.append([r["digest"] for r in results])
    fp = fingerprint(ctx.fingerprint, LM_CODE_VERSION, bos_token, dict(state.part_fps), digests)
    part_fps = {name: fingerprint(fp, name) for name in streams}
    return StepResult(
        replace(
            state, parts=streams, part_fps=part_fps, extra={**state.extra, "documents": dict(state.parts)}
        ),
        fp,
        parts=part_fps,
        params={
            "eos": cfg.eos,
            "eos_token": cfg.eos_token,
            "bos_token": bos_token,
            "special_tokens_in_text": "split",
        },
        stats=stats,
    )

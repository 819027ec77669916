"""The LM order-error lab: each LLM data-order error injected into a real training run, and its cost.

For every case the reference GPT (:class:`~lightning_order.OrderedCausalLM`, tiny) trains with the
same seed, data and step budget twice: on data prepared in the mandated order and on data prepared
with the error injected (``OrderedLMDataModule(order=..., enforce=False)`` or ``eos=False``, a
token added to the tokenizer after the model was built, a tokenizer trained on each rank's own
shard). ``OrderValidator(on_violation="warn")`` rides along so the faulty run goes on, and we
record whether it named the error before step 1.

Measured per run: validation perplexity (the datamodule's validation blocks, its own tokenizer),
held-out perplexity and bits per byte (documents never given to the datamodule, encoded with the
run's tokenizer, one end-of-text after each; bits per byte compare runs whose tokenizers differ),
steps to a target (the first evaluation at which held-out bits per byte is within 5 % of the
correct run's final value, same seed), and the end-of-text generation rate (prompted with the last
tokens of held-out documents: how often the model ends the document within ``gen_tokens``).

The corpus is the standard library's documentation (:func:`~lightning_order.data.lm.corpus.stdlib_corpus`)
with what makes these errors bite in scraped corpora: half the documents carry dirt that cleaning
removes (CRLF line ends, trailing spaces, runs of blank lines, control characters, full-width
letters, ligatures, non-breaking spaces) and a share have near-copies (1 % of words changed,
other dirt) appended, as mirrors do. One document in ten (by hash) is held out before anything.

The per-rank tokenizer case is measured in one process: two "ranks" each with its own tokenizer
and shard, one model, the loss averaged over both (what DDP's gradient all-reduce computes),
against the same loop with the shared tokenizer; whether the validator catches it comes from a
real 2-rank DDP run on CPU (gloo) with the datamodule that trains per rank
(:class:`PerRankTokenizerLM`).

Usage (from the repository root)::

    python benchmarks/lm_lab.py                      # 3 seeds, writes docs/lab/ and docs/lm-lab.md
    python benchmarks/lm_lab.py --tiny --out /tmp/lm # the test configuration (1 seed, tiny)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # launching.py: run_ranks

import logging

import numpy as np
import pytorch_lightning as pl
import torch
import xxhash
from launching import run_ranks
from pytorch_lightning.callbacks import Callback

from lightning_order import RULES, OrderedCausalLM, OrderedLMDataModule, OrderValidator, OrderWarning
from lightning_order.data.lm.blocks import encode_documents
from lightning_order.data.lm.config import EOS_TOKEN
from lightning_order.data.lm.corpus import stdlib_corpus
from lightning_order.data.lm.steps import clean_document
from lightning_order.data.lm.tokenizer import train_byte_bpe
from lightning_order.distributed import release_process_group

for _name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
    logging.getLogger(_name).setLevel(logging.WARNING)
# One torch thread per process: on a shared machine, spinning intra-op threads make a tiny
# model several times slower (measured: 1.08 s against 0.17 s per backward step at load 7).
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "lab"
DOC = REPO / "docs" / "lm-lab.md"
RIGHT = ["load", "clean", "dedup", "split", "build_vocab", "encode", "pack", "shard"]
PAD = "<|pad|>"


@dataclass(frozen=True)
class LabConfig:
    """The lab's sizes (the defaults are the full lab; :meth:`tiny` the test's)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    max_documents: int | None = 900
    max_steps: int = 300
    eval_every: int = 50
    batch_size: int = 16
    block_size: int = 64
    vocab_size: int = 2048
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    lr: float = 3e-3
    dirty_share: float = 0.5
    copy_share: float = 0.5
    gen_prompts: int = 24
    gen_tokens: int = 24
    pad_positions: int = 8
    ddp: bool = True

    @classmethod
    def tiny(cls) -> LabConfig:
        return cls(seeds=(0,), max_documents=300, max_steps=40, eval_every=20, gen_prompts=6, ddp=False)


@dataclass(frozen=True)
class Case:
    """One LM order error: how it is injected and the rule codes the validator should report."""

    name: str
    title: str
    expected_rules: tuple[str, ...]
    order: tuple[str, ...] = tuple(RIGHT)
    eos: bool = True
    pad_after_init: bool = False
    per_rank_tokenizer: bool = False


CASES: tuple[Case, ...] = (
    Case(
        "vocab-before-clean",
        "tokenizer trained before cleaning (on the raw corpus)",
        ("vocab-before-clean",),
        order=("load", "build_vocab", "clean", "dedup", "split", "encode", "pack", "shard"),
    ),
    Case(
        "vocab-changed-after-init",
        f"special token ({PAD}) added after the model was built, then used to pad",
        ("vocab-changed-after-init",),
        pad_after_init=True,
    ),
    Case("pack-without-eos", "documents packed without end-of-text", ("pack-without-eos",), eos=False),
    Case(
        "dedup-after-split",
        "deduplication after the train/validation split",
        ("dedup-after-split",),
        order=("load", "clean", "split", "dedup", "build_vocab", "encode", "pack", "shard"),
    ),
    Case(
        "tokenizer-per-rank",
        "tokenizer trained on each rank's own shard under DDP (2 ranks)",
        ("rank-mismatch", "vocab-changed-after-init"),
        per_rank_tokenizer=True,
    ),
)


# -- the corpus -----------------------------------------------------------------------------------
_FULL_WIDTH = {c: chr(ord(c) + 0xFEE0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"}


def dirty(text: str, rng: random.Random) -> str:
    """Scraped-text dirt that :func:`clean_document` removes: the cleaned text is unchanged."""
    words = text.split(" ")
    for i in range(len(words)):
        roll = rng.random()
        if roll < 0.04:
            words[i] = "".join(_FULL_WIDTH.get(c, c) for c in words[i])
        elif roll < 0.06:
            words[i] = words[i].replace("fi", "\ufb01")
    text = " ".join(words).replace(". ", ".\u00a0", 2)
    lines = [line + " " * rng.randint(0, 3) for line in text.split("\n")]
    text = "\r\n".join(lines).replace("\r\n\r\n", "\r\n\r\n\r\n\r\n", 1)
    return "\x0b" + text + "\x07" if rng.random() < 0.5 else text


def near_copy(text: str, rng: random.Random) -> str:
    """A mirror's copy: a header and a footer line added, 1 % of the words changed, other dirt.

    After cleaning it is a near-duplicate of ``text`` (word 5-gram Jaccard about 0.8-0.95 for
    documents of 50 words or more), never an exact one.
    """
    words = text.split(" ")
    for i in rng.sample(range(len(words)), len(words) // 100):
        words[i] = words[i] + "s"
    return dirty(f"{_MIRROR_HEAD}\n{' '.join(words)}\n{_MIRROR_FOOT}", rng)


_MIRROR_HEAD = "Mirror:"
_MIRROR_FOOT = "(retrieved from a mirror)"


def build_lab_corpus(cfg: LabConfig, folder: Path) -> dict[str, Any]:
    """Writes ``pool.parquet`` (what the datamodule reads) and returns the held-out documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = stdlib_corpus(cfg.max_documents)
    held = [d for d in docs if xxhash.xxh3_64_intdigest(d.encode()) % 10 == 0]
    pool = [d for d in docs if xxhash.xxh3_64_intdigest(d.encode()) % 10 != 0]
    rng = random.Random(1234)
    raw = [dirty(d, rng) if rng.random() < cfg.dirty_share else d for d in pool]
    copies = [near_copy(d, rng) for d in pool if rng.random() < cfg.copy_share]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pool.parquet"
    pq.write_table(pa.table({"text": raw + copies}), str(path))
    held_clean = [c for c in map(clean_document, held) if c]
    return {
        "pool": str(path),
        "held_out": held_clean,
        "pool_documents": len(raw) + len(copies),
        "copies": len(copies),
    }


# -- measurements ---------------------------------------------------------------------------------
def pack_stream(ids: np.ndarray, block_size: int) -> tuple[np.ndarray, int]:
    """``ids`` cut into ``(n, block_size + 1)`` blocks (a view, no copy) and the tokens left over."""
    width = block_size + 1
    count = len(ids) // width
    return ids[: count * width].reshape(count, width), len(ids) - count * width


@torch.no_grad()
def nll(model: torch.nn.Module, blocks: np.ndarray, batch: int = 64) -> tuple[float, int]:
    """Summed next-token negative log-likelihood (nats) over ``blocks`` (``n × (T+1)``) and its token count."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(blocks), batch):
        ids = torch.as_tensor(np.asarray(blocks[start : start + batch], dtype=np.int64))
        logits = model({"input_ids": ids[:, :-1]})
        total += float(
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum")
        )
        count += int(ids[:, 1:].numel())
    model.train(was)
    return total, count


class HeldOut:
    """Held-out documents under one tokenizer: blocks for perplexity and bits per byte, prompts for stopping."""

    def __init__(
        self, tokenizer: Any, documents: list[str], block_size: int, eos_id: int, prompts: int
    ) -> None:
        stream = encode_documents(tokenizer, documents, eos_id)
        self.blocks, _ = pack_stream(stream.ids, block_size)
        # Bytes the evaluated tokens stand for, pro rata (the dropped remainder is a few tokens).
        self.bytes = sum(len(d.encode()) for d in documents) * (self.blocks.size / max(1, len(stream.ids)))
        self.eos_id = eos_id
        starts = np.concatenate([[0], stream.ends[:-1] + 1])
        self.prompts = [
            stream.ids[max(s, e - 24) : e].tolist()
            for s, e in zip(starts[:prompts], stream.ends[:prompts])
            if e - s > 4
        ]

    def measure(self, model: torch.nn.Module) -> dict[str, float]:
        total, count = nll(model, self.blocks)
        return {"held_out_ppl": math.exp(total / count), "held_out_bpb": total / math.log(2) / self.bytes}

    def eos_rate(self, model: OrderedCausalLM, tokens: int, seed: int) -> float:
        ended = 0
        for i, prompt in enumerate(self.prompts):
            new = model.generate(prompt, tokens, eos_token_id=self.eos_id, seed=seed * 1000 + i)
            ended += bool(new) and new[-1] == self.eos_id
        return ended / max(1, len(self.prompts))


def steps_to_target(curve: Sequence[tuple[int, float]], target: float) -> int | None:
    """The first step whose value is at or below ``target`` (``None``: never)."""
    return next((step for step, value in curve if value <= target), None)


class _Recorder(Callback):
    """Train losses, held-out bits per byte every ``every`` steps, batches started, optional padding."""

    def __init__(self, held: HeldOut | None, every: int, pad: tuple[int, int] | None = None) -> None:
        self.held, self.every, self.pad = held, every, pad
        self.losses: list[float] = []
        self.curve: list[tuple[int, float]] = []
        self.batches_started = 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, *args: Any
    ) -> None:
        self.batches_started += 1
        if self.pad is not None:  # right-padding with the token added after init (labels ignored there)
            pad_id, width = self.pad
            batch["input_ids"][:, -width:] = pad_id
            batch["labels"][:, -width:] = -100

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.losses.append(round(float(loss.detach()), 4))
        if self.held is not None and trainer.global_step % self.every == 0:
            self.curve.append(
                (int(trainer.global_step), round(self.held.measure(pl_module)["held_out_bpb"], 4))
            )


_RULE_IN_TEXT = re.compile(r"\[([a-z][a-z-]+)\]")


@contextlib.contextmanager
def _order_warnings(recorder: _Recorder) -> Iterator[list[dict[str, Any]]]:
    caught: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always", OrderWarning)
        previous = warnings.showwarning

        def show(message: Any, category: type, *args: Any) -> None:
            if issubclass(category, OrderWarning):
                caught.append({"text": str(message), "batches_started": recorder.batches_started})

        warnings.showwarning = show
        try:
            yield caught
        finally:
            warnings.showwarning = previous


def _rules(caught: list[dict[str, Any]]) -> list[str]:
    found = (r for w in caught for r in _RULE_IN_TEXT.findall(w["text"]))
    return list(dict.fromkeys(r for r in found if r in RULES))


def _trainer(cfg: LabConfig, callbacks: list[Callback], devices: int = 1) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=cfg.max_steps,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _model(cfg: LabConfig, dims: dict[str, int]) -> OrderedCausalLM:
    return OrderedCausalLM(
        **dims, n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd, lr=cfg.lr, warmup_steps=20
    )


def make_datamodule(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, case: Case | None, cache: str, **kw: Any
):
    """The lab's datamodule for one seed (``enforce=False``: a faulty order runs as asked)."""
    return OrderedLMDataModule(
        "parquet",
        data_files=corpus["pool"],
        seed=seed,
        vocab_size=cfg.vocab_size,
        block_size=cfg.block_size,
        batch_size=cfg.batch_size,
        cache_dir=cache,
        order=list(case.order) if case else None,
        eos=case.eos if case else True,
        enforce=False,
        **kw,
    )


def run_training(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, case: Case | None, cache: str
) -> dict[str, Any]:
    """One Lightning run (``case=None``: the correct order) and everything it measured."""
    dm = make_datamodule(cfg, corpus, seed, case, cache)
    dims = dm.dims
    pl.seed_everything(seed, verbose=False)
    model = _model(cfg, dims)
    eos_id = dm.eos_token_id
    held = HeldOut(dm.tokenizer, corpus["held_out"], cfg.block_size, eos_id, cfg.gen_prompts)
    pad = None
    if case is not None and case.pad_after_init:
        dm.tokenizer.add_special_tokens([PAD])  # after OrderedCausalLM(**dm.dims): the wrong order
        pad = (dm.tokenizer.token_to_id(PAD), cfg.pad_positions)
    recorder = _Recorder(held, cfg.eval_every, pad)
    trainer = _trainer(cfg, [OrderValidator(on_violation="warn"), recorder])
    started, error = time.perf_counter(), None
    with _order_warnings(recorder) as caught:
        try:
            trainer.fit(model, dm)
        except Exception as err:  # a faulty run may crash: that is a measurement too
            error = {
                "type": type(err).__name__,
                "message": str(err).splitlines()[0][:200],
                "step": trainer.global_step,
            }
    result: dict[str, Any] = {
        "case": case.name if case else "correct",
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 1),
        "dims": dims,
        "error": error,
        "global_step": int(trainer.global_step),
        "losses": recorder.losses,
        "curve": recorder.curve,
        "validator_rules": _rules(caught),
        "validator_before_step_1": bool(caught) and all(w["batches_started"] == 0 for w in caught),
        "ledger": {r.step: r.stats for r in dm.ledger.records},
    }
    if error is None:
        total, count = nll(model, dm.blocks("val"))
        result["val_ppl"] = math.exp(total / count) if count else None
        result.update(held.measure(model))
        result["eos_generation_rate"] = held.eos_rate(model, cfg.gen_tokens, seed)
        result["dead_vocab_share"] = dead_vocab_share(dm)
    return result


def dead_vocab_share(dm: OrderedLMDataModule) -> float:
    """The share of the tokenizer's tokens that never occur in the (cleaned) train documents it encodes."""
    used = np.zeros(dm.tokenizer.get_vocab_size(), dtype=bool)
    for encoding in dm.tokenizer.encode_batch(dm.documents("train"), add_special_tokens=False):
        used[encoding.ids] = True
    used[dm.eos_token_id] = True
    return float(1.0 - used.mean())


# -- the per-rank tokenizer case: cost in one process, detection in real DDP ----------------------
def _rank_streams(
    dm: OrderedLMDataModule, cfg: LabConfig, per_rank: bool, world: int = 2
) -> list[tuple[Any, np.ndarray]]:
    docs = dm.documents("train")
    out = []
    for rank in range(world):
        mine = docs[rank::world]
        tokenizer = train_byte_bpe(mine, cfg.vocab_size) if per_rank else dm.tokenizer
        blocks, _ = pack_stream(
            encode_documents(tokenizer, mine, tokenizer.token_to_id(EOS_TOKEN)).ids, cfg.block_size
        )
        out.append((tokenizer, blocks))
    count = min(len(b) for _, b in out)  # the same number of blocks on every rank, as shard does
    return [(t, b[:count]) for t, b in out]


def run_simulated_ddp(
    cfg: LabConfig, corpus: dict[str, Any], seed: int, per_rank: bool, cache: str
) -> dict[str, Any]:
    """Two ranks in one process: each its own batches (and tokenizer when ``per_rank``), loss averaged."""
    dm = make_datamodule(cfg, corpus, seed, None, cache)
    ranks = _rank_streams(dm, cfg, per_rank)
    tokenizer = ranks[0][0]  # rank 0's is the one a checkpoint would carry
    size = max(t.get_vocab_size() for t, _ in ranks)
    dims = {"vocab_size": size, "padded_vocab_size": -(-size // 64) * 64, "block_size": cfg.block_size}
    torch.manual_seed(seed)
    model = _model(cfg, dims)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 20
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / warmup
            if s < warmup
            else 0.1
            + 0.45 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, cfg.max_steps - warmup))))
        ),
    )
    held = HeldOut(
        tokenizer, corpus["held_out"], cfg.block_size, tokenizer.token_to_id(EOS_TOKEN), cfg.gen_prompts
    )
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(len(b)) for _, b in ranks]
    losses, curve, started = [], [], time.perf_counter()
    model.train()
    for step in range(cfg.max_steps):
        loss = 0.0
        for (_, blocks), order in zip(ranks, orders):
            idx = order[(step * cfg.batch_size + np.arange(cfg.batch_size)) % len(order)]
            ids = torch.as_tensor(blocks[idx].astype(np.int64))
            logits = model({"input_ids": ids[:, :-1]})
            loss = loss + torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()) / len(
                ranks
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(round(float(loss.detach()), 4))
        if (step + 1) % cfg.eval_every == 0:
            curve.append((step + 1, round(held.measure(model)["held_out_bpb"], 4)))
    val = dm.documents("val")
    val_blocks, _ = pack_stream(
        encode_documents(tokenizer, val, tokenizer.token_to_id(EOS_TOKEN)).ids, cfg.block_size
    )
    total, count = nll(model, val_blocks)
    shared = len(set(ranks[0][0].get_vocab().items()) & set(ranks[1][0].get_vocab().items()))
    return {
        "case": "tokenizer-per-rank" if per_rank else "correct-ddp",
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 1),
        "dims": dims,
        "error": None,
        "global_step": cfg.max_steps,
        "losses": losses,
        "curve": curve,
        "val_ppl": math.exp(total / count) if count else None,
        **held.measure(model),
        "eos_generation_rate": held.eos_rate(model, cfg.gen_tokens, seed),
        "tokens_with_the_same_id_on_both_ranks": shared / ranks[0][0].get_vocab_size(),
    }


class PerRankTokenizerLM(OrderedLMDataModule):
    """The wrong order for real: ``setup`` trains a tokenizer on this rank's own train documents.

    Each rank then encodes and packs its own share with its own tokenizer, so the same id means a
    different token on each rank while DDP averages their gradients.
    """

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        trainer = getattr(self, "trainer", None)
        world, rank = (int(trainer.world_size), int(trainer.global_rank)) if trainer else (1, 0)
        mine = self.documents("train")[rank::world]
        self._tokenizer = train_byte_bpe(mine, self.config.vocab_size)
        stream = encode_documents(self._tokenizer, mine, self._tokenizer.token_to_id(EOS_TOKEN))
        blocks, _ = pack_stream(stream.ids, self.config.block_size)
        self._train = blocks[: len(self._train)]


def _ddp_worker(args: argparse.Namespace) -> None:
    """One rank of the real DDP detection run (both ranks started by :func:`detect_per_rank_ddp`)."""
    cfg = LabConfig(**json.loads(args.cfg))
    cfg = replace(cfg, max_steps=2, seeds=tuple(cfg.seeds))
    dm = PerRankTokenizerLM(
        "parquet",
        data_files=args.pool,
        vocab_size=cfg.vocab_size,
        block_size=cfg.block_size,
        batch_size=cfg.batch_size,
        cache_dir=args.cache,
    )
    model = _model(cfg, dm.dims)
    recorder = _Recorder(None, cfg.eval_every)
    trainer = _trainer(cfg, [OrderValidator(on_violation="warn"), recorder], devices=2)
    with _order_warnings(recorder) as caught:
        trainer.fit(model, dm)
    if trainer.global_rank == 0:
        Path(args.ddp_out).write_text(
            json.dumps(
                {
                    "validator_rules": _rules(caught),
                    "validator_before_step_1": bool(caught)
                    and all(w["batches_started"] == 0 for w in caught),
                    "first_warning": caught[0]["text"][:1500] if caught else None,
                }
            )
        )
    release_process_group()


def detect_per_rank_ddp(cfg: LabConfig, corpus: dict[str, Any], cache: str) -> dict[str, Any]:
    """Runs the 2-rank DDP detection in a subprocess and reads what rank 0 saw."""
    Path(cache).mkdir(parents=True, exist_ok=True)
    out = Path(cache) / "ddp_result.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--ddp-worker",
        "--pool",
        corpus["pool"],
        "--cache",
        cache,
        "--ddp-out",
        str(out),
        "--cfg",
        json.dumps(asdict(cfg)),
    ]
    # Both ranks at once, as torchrun starts them: the two imports run side by side.
    finished = run_ranks(cmd, 2, cwd=cache, timeout=600)
    failed = next((proc.stderr for proc in finished if proc.returncode), None)
    if failed is not None or not out.exists():
        return {"error": (failed or "")[-1500:], "validator_rules": [], "validator_before_step_1": False}
    return json.loads(out.read_text())


# -- the runner -----------------------------------------------------------------------------------
METRICS = ("val_ppl", "held_out_ppl", "held_out_bpb", "eos_generation_rate", "dead_vocab_share")


def _mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None, None
    return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else 0.0)


def summarise(runs: list[dict[str, Any]], cases: Sequence[Case] = CASES) -> list[dict[str, Any]]:
    """Per case: each metric's mean and std over seeds, correct against faulty, and detection."""
    by = {(r["case"], r["seed"]): r for r in runs}
    rows = []
    for case in cases:
        base_name = "correct-ddp" if case.per_rank_tokenizer else "correct"
        wrong = [r for r in runs if r["case"] == case.name]
        right = [by[(base_name, r["seed"])] for r in wrong if (base_name, r["seed"]) in by]
        row: dict[str, Any] = {
            "case": case.name,
            "title": case.title,
            "baseline": base_name,
            "seeds": len(wrong),
        }
        for metric in METRICS:
            row[metric] = {
                "correct": _mean_std([r.get(metric) for r in right]),
                "wrong": _mean_std([r.get(metric) for r in wrong]),
            }
        row["val_over_held_out"] = {
            side: _mean_std(
                [
                    r["val_ppl"] / r["held_out_ppl"]
                    for r in group
                    if r.get("val_ppl") and r.get("held_out_ppl")
                ]
            )
            for side, group in (("correct", right), ("wrong", wrong))
        }
        steps = []
        for r in wrong:
            base = by.get((base_name, r["seed"]))
            if base and base.get("held_out_bpb") and r.get("curve"):
                steps.append(
                    (
                        steps_to_target(base["curve"], base["held_out_bpb"] * 1.05),
                        steps_to_target(r["curve"], base["held_out_bpb"] * 1.05),
                    )
                )
        row["steps_to_target"] = steps
        row["errors"] = [r["error"] for r in wrong if r.get("error")]
        detection = [r for r in wrong if "validator_rules" in r]
        row["validator_rules"] = sorted({x for r in detection for x in r["validator_rules"]})
        row["caught_before_step_1"] = bool(detection) and all(
            r["validator_before_step_1"] and set(case.expected_rules) & set(r["validator_rules"])
            for r in detection
        )
        rows.append(row)
    return rows


def _fmt(pair: tuple[float | None, float | None], digits: int = 2) -> str:
    mean, std = pair
    if mean is None:
        return "–"
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if std else f"{mean:.{digits}f}"


def render_table(rows: list[dict[str, Any]], correct_rules: list[str]) -> str:
    """The lab's table in Markdown (correct → faulty, mean ± std over seeds)."""
    lines = [
        "| error | caught before step 1 (rules) | val ppl | held-out ppl | held-out bits/byte | val ppl / held-out ppl | "
        "steps to target (correct → faulty) | end-of-text generation rate | other |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:

        def pair(metric: str, digits: int = 2, row=row) -> str:
            return f"{_fmt(row[metric]['correct'], digits)} → {_fmt(row[metric]['wrong'], digits)}"

        steps = (
            ", ".join(f"{a} → {b if b is not None else 'never'}" for a, b in row["steps_to_target"]) or "–"
        )
        other = []
        if row["errors"]:
            e = row["errors"][0]
            other.append(
                f"crashed in its first step: `{e['type']}: {e['message'][:80]}` ({len(row['errors'])}/{row['seeds']} seeds)"
                if e["step"] == 0
                else f"crashed after {e['step']} steps: `{e['type']}: {e['message'][:80]}` ({len(row['errors'])}/{row['seeds']} seeds)"
            )
        if row["dead_vocab_share"]["wrong"][0] is not None and row["case"] == "vocab-before-clean":
            other.append(f"dead vocabulary {pair('dead_vocab_share', 3)}")
        caught = (
            "yes" if row["caught_before_step_1"] else "no"
        ) + f" ({', '.join(row['validator_rules']) or 'none'})"
        lines.append(
            f"| {row['title']} | {caught} | {pair('val_ppl', 1)} | {pair('held_out_ppl', 1)} | {pair('held_out_bpb', 3)} | "
            f"{_fmt(row['val_over_held_out']['correct'])} → {_fmt(row['val_over_held_out']['wrong'])} | {steps} | "
            f"{pair('eos_generation_rate')} | {'; '.join(other) or '–'} |"
        )
    lines.append("")
    lines.append(
        "The per-rank tokenizer row compares two simulated ranks with their own tokenizers against the same "
        "two-rank loop with the shared tokenizer (2 × 16 blocks a step), not against the single-process "
        "correct run of the other rows; its detection comes from a real 2-rank DDP run. Perplexities per "
        "token compare only runs with the same tokenizer; bits per byte compare all."
    )
    lines.append("")
    lines.append(f"Validator on the correct runs: {', '.join(correct_rules) or 'no violation'}.")
    return "\n".join(lines)


def plot_curves(runs: list[dict[str, Any]], out: Path, cases: Sequence[Case] = CASES) -> list[str]:
    """One PNG per case: held-out bits per byte against steps, correct and faulty, every seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for case in cases:
        base_name = "correct-ddp" if case.per_rank_tokenizer else "correct"
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        for name, colour in ((base_name, "tab:blue"), (case.name, "tab:red")):
            for i, r in enumerate(x for x in runs if x["case"] == name and x.get("curve")):
                steps, values = zip(*r["curve"])
                ax.plot(steps, values, color=colour, alpha=0.8, label=name if i == 0 else None)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("held-out bits per byte")
        ax.set_title(case.title, fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"lm_{case.name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path.name)
    return written


def run_lab(cfg: LabConfig, out: Path, cases: Sequence[Case] = CASES) -> dict[str, Any]:
    """Every case and its baselines over every seed; writes ``lm_results.json``, ``lm_table.md``, PNGs."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lm_lab_") as tmp:
        corpus = build_lab_corpus(cfg, Path(tmp) / "corpus")
        cache = str(Path(tmp) / "cache")
        for seed in cfg.seeds:
            runs.append(run_training(cfg, corpus, seed, None, cache))
            for case in cases:
                if case.per_rank_tokenizer:
                    runs.append(run_simulated_ddp(cfg, corpus, seed, False, cache))
                    runs.append(run_simulated_ddp(cfg, corpus, seed, True, cache))
                else:
                    runs.append(run_training(cfg, corpus, seed, case, cache))
        (out / "lm_runs_partial.json").write_text(json.dumps(runs, default=str))  # kept if DDP fails
        ddp = None
        if cfg.ddp and any(c.per_rank_tokenizer for c in cases):
            ddp = detect_per_rank_ddp(cfg, corpus, str(Path(tmp) / "ddp"))
            for r in runs:
                if r["case"] == "tokenizer-per-rank":
                    r.update({k: ddp[k] for k in ("validator_rules", "validator_before_step_1")})
        corpus_info = {k: v for k, v in corpus.items() if k != "held_out"} | {
            "held_out_documents": len(corpus["held_out"])
        }
    rows = summarise(runs, cases)
    correct_rules = sorted({x for r in runs if r["case"] == "correct" for x in r["validator_rules"]})
    results = {
        "config": asdict(cfg),
        "corpus": corpus_info,
        "seconds": round(time.perf_counter() - started, 1),
        "summary": rows,
        "correct_validator_rules": correct_rules,
        "ddp_detection": ddp,
        "runs": runs,
    }
    (out / "lm_results.json").write_text(json.dumps(results, indent=1, default=str))
    table = _header(results) + render_table(rows, correct_rules)
    (out / "lm_table.md").write_text(table + "\n")
    (out / "lm_runs_partial.json").unlink(missing_ok=True)
    results["plots"] = plot_curves(runs, out, cases)
    return results


def _header(results: dict[str, Any]) -> str:
    cfg, corpus = results["config"], results["corpus"]
    return (
        f"{len(cfg['seeds'])} seed(s), {cfg['max_steps']} steps per run, batches of {cfg['batch_size']} blocks of "
        f"{cfg['block_size']} tokens, BPE of {cfg['vocab_size']}; corpus of {corpus['pool_documents']} documents "
        f"({corpus['copies']} mirror copies), {corpus['held_out_documents']} held out; lab time {results['seconds']} s. "
        "Correct → faulty, mean ± std over seeds.\n\n"
    )


def update_doc(table: str, doc: Path = DOC) -> None:
    """Replaces the generated table in ``doc`` (between its markers)."""
    start, end = "<!-- lm-lab-table:start -->", "<!-- lm-lab-table:end -->"
    text = doc.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{table}\n{end}{tail}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="1 seed, tiny sizes (the test's configuration)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--no-ddp", action="store_true", help="skip the real 2-rank DDP detection run")
    parser.add_argument(
        "--render", type=Path, default=None, help="re-render the table from an lm_results.json"
    )
    parser.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pool", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--ddp-out", help=argparse.SUPPRESS)
    parser.add_argument("--cfg", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ddp_worker:
        _ddp_worker(args)
        return
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        table = _header(saved) + render_table(summarise(saved["runs"]), saved["correct_validator_rules"])
        (args.out / "lm_table.md").write_text(table + "\n")
        print(table)
        if args.out.resolve() == DEFAULT_OUT.resolve() and DOC.exists():
            update_doc(table.strip())
        return
    cfg = LabConfig.tiny() if args.tiny else LabConfig()
    if args.seeds:
        cfg = replace(cfg, seeds=tuple(args.seeds))
    if args.no_ddp:
        cfg = replace(cfg, ddp=False)
    results = run_lab(cfg, args.out)
    table = (args.out / "lm_table.md").read_text()
    print(table)
    print(f"lab: {results['seconds']} s")
    if args.out.resolve() == DEFAULT_OUT.resolve() and DOC.exists():
        update_doc(table.strip())


if __name__ == "__main__":
    main()

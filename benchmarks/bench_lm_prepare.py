"""Benchmark: ``OrderedLMDataModule.prepare_data`` against the floor (tokenizer training + ``encode_batch``).

The floor is the work no LM data pipeline can skip: read the text, train the same byte-level BPE
(same pre-tokenizer, vocabulary size and special token) on the same train documents, and
``encode_batch`` every document. Ours does that and everything the floor does not: cleaning,
exact + near-duplicate removal, the split by document hash, packing into blocks, the ledger, the
cache folder (written, hashed, published atomically). The train documents the floor learns from
and the documents it encodes are ours exactly (computed first, untimed, with our own cleaning,
dedup and split functions, and written to a Parquet file the floor reads).

Two corpus sizes: the standard-library corpus (:func:`~lightning_order.data.lm.corpus.stdlib_corpus`,
about 1.1 MB) and that corpus repeated to 4× with varied words (each extra copy swaps 30 % of the
vocabulary for other words of it, so no copy is a near-duplicate of another and dedup cannot make
the work smaller). Both sides read the same Parquet file of raw documents. Each run is a fresh
process (imports not timed), alternating ours / floor, best of ``--repeats``.

Also reported: the dedup step's throughput (MB of cleaned text per second), from our ledger's own
timings and measured alone in the parent (best of 3), and our time by step (from the ledger's
record times).

Usage::

    python benchmarks/bench_lm_prepare.py [--repeats 2] [--copies 1 4] [--json out.json]

Prints one JSON line per size and a summary table: ours / floor (target <= 1.5).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

VOCAB_SIZE = 8000
BLOCK_SIZE = 128
_WORD = re.compile(r"[a-z]+")


def varied_corpus(documents: list[str], copies: int, *, swap: float = 0.3, seed: int = 0) -> list[str]:
    """``documents`` followed by ``copies - 1`` copies whose words are partly swapped for others.

    Copy ``k`` maps a random ``swap`` share of the lower-case vocabulary onto a shuffle of itself
    (the same map for the whole copy), so its text reads like the documentation (same words, same
    layout) but shares few word 5-grams with any other copy: none is a near-duplicate.
    """
    vocab = sorted({w for d in documents for w in _WORD.findall(d)})
    out = list(documents)
    for k in range(1, copies):
        rng = random.Random(seed * 1000 + k)
        chosen = rng.sample(vocab, int(len(vocab) * swap))
        shuffled = chosen[:]
        rng.shuffle(shuffled)
        table = dict(zip(chosen, shuffled))
        out.extend(_WORD.sub(lambda m, t=table: t.get(m.group(0), m.group(0)), d) for d in documents)
    return out


def _write(path: Path, columns: dict[str, list]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), str(path))


def _cpu() -> float:
    """CPU seconds of this process so far, every thread included (less sensitive to a busy machine)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _mb(texts: list[str]) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


# -- the two sides, each in its own process -------------------------------------------------------
def _ours(data: str, cache: str) -> dict:
    from lightning_order import OrderedLMDataModule

    dm = OrderedLMDataModule(
        "parquet", data_files=data, vocab_size=VOCAB_SIZE, block_size=BLOCK_SIZE, cache_dir=cache
    )
    start, cpu = time.perf_counter(), _cpu()
    wall = time.time()
    dm.prepare_data()
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    end = time.time()
    steps, previous = {}, wall
    for record in dm.ledger.records:
        steps[record.step] = record.time - previous
        previous = record.time
    steps["write cache"] = end - previous
    dedup = next(r for r in dm.ledger.records if r.step == "dedup")
    clean = next(r for r in dm.ledger.records if r.step == "clean")
    return {
        "seconds": elapsed,
        "cpu": cpu,
        "steps": steps,
        "dedup_stats": dedup.stats,
        "clean_stats": clean.stats,
    }


def _floor(data: str, docs: str) -> dict:
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from lightning_order.data.lm.config import EOS_TOKEN
    from lightning_order.data.lm.tokenizer import bounded_byte_level

    start, cpu = time.perf_counter(), _cpu()
    pq.read_table(data, columns=["text"]).column("text").to_pylist()  # read the text, as ours does
    table = pq.read_table(docs)
    texts = table.column("text").to_pylist()
    train = [t for t, is_train in zip(texts, table.column("train").to_pylist()) if is_train]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = bounded_byte_level()
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(train, trainer=trainer, length=len(train))
    trained = time.perf_counter()
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    return {
        "seconds": elapsed,
        "cpu": cpu,
        "train_seconds": trained - start,
        "tokens": sum(len(e.ids) for e in encodings),
    }


def _worker(args: argparse.Namespace) -> None:
    result = _ours(args.data, args.cache) if args.worker == "ours" else _floor(args.data, args.docs)
    print("RESULT " + json.dumps(result))


def _run(kind: str, data: Path, docs: Path, cache: Path) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--data",
        str(data),
        "--docs",
        str(docs),
        "--cache",
        str(cache),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        raise RuntimeError(f"{kind} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(line[len("RESULT ") :])


# -- the parent ---------------------------------------------------------------------------------
def _prepare_inputs(folder: Path, copies: int, base: list[str]) -> dict:
    """Writes the raw corpus and the floor's documents (ours, untimed); measures dedup alone."""
    from lightning_order.data.engine.keys import is_val
    from lightning_order.data.lm.clusters import deduplicate
    from lightning_order.data.lm.steps import clean_document

    raw = varied_corpus(base, copies)
    data = folder / f"corpus_x{copies}.parquet"
    _write(data, {"text": raw})
    cleaned = [c for c in map(clean_document, raw) if c]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        result = deduplicate(cleaned, threshold=0.8, seed=0)
        best = min(best, time.perf_counter() - start)
    kept = [cleaned[i] for i in result.keep.tolist()]
    val = is_val(kept, 0.1, 0, text=True)
    docs = folder / f"docs_x{copies}.parquet"
    # Ours encodes train then validation documents; the floor encodes the same documents.
    _write(docs, {"text": kept, "train": [not v for v in val]})
    return {
        "data": data,
        "docs": docs,
        "documents": len(raw),
        "mb": _mb(raw),
        "clean_mb": _mb(cleaned),
        "dedup_alone_s": best,
        "dedup_alone_mb_s": _mb(cleaned) / best,
        "exact_removed": result.exact_removed,
        "near_removed": result.near_removed,
        "kept": len(kept),
    }


def _measure(folder: Path, copies: int, base: list[str], repeats: int) -> dict:
    inputs = _prepare_inputs(folder, copies, base)
    ours, floor = [], []
    for repeat in range(repeats):
        cache = folder / f"cache_x{copies}_{repeat}"
        ours.append(_run("ours", inputs["data"], inputs["docs"], cache))
        floor.append(_run("floor", inputs["data"], inputs["docs"], cache))
    best_ours = min(ours, key=lambda r: r["seconds"])
    best_floor = min(floor, key=lambda r: r["seconds"])
    dedup_s = best_ours["steps"]["dedup"]
    return {
        "copies": copies,
        "documents": inputs["documents"],
        "mb": round(inputs["mb"], 3),
        "kept": inputs["kept"],
        "exact_removed": inputs["exact_removed"],
        "near_removed": inputs["near_removed"],
        "ours_s": round(best_ours["seconds"], 3),
        "floor_s": round(best_floor["seconds"], 3),
        "floor_train_s": round(best_floor["train_seconds"], 3),
        "ratio": round(best_ours["seconds"] / best_floor["seconds"], 3),
        "cpu_ratio": round(min(r["cpu"] for r in ours) / min(r["cpu"] for r in floor), 3),
        "ours_mb_s": round(inputs["mb"] / best_ours["seconds"], 2),
        "floor_mb_s": round(inputs["mb"] / best_floor["seconds"], 2),
        "dedup_step_s": round(dedup_s, 4),
        "dedup_step_mb_s": round(inputs["clean_mb"] / dedup_s, 1) if dedup_s > 0 else None,
        "dedup_alone_mb_s": round(inputs["dedup_alone_mb_s"], 1),
        "ours_steps_s": {k: round(v, 3) for k, v in best_ours["steps"].items()},
        "all_ours_s": [round(r["seconds"], 3) for r in ours],
        "all_floor_s": [round(r["seconds"], 3) for r in floor],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", choices=["ours", "floor"], default=None)
    parser.add_argument("--data", default=None)
    parser.add_argument("--docs", default=None)
    parser.add_argument("--cache", default=None)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    from lightning_order.data.lm.corpus import stdlib_corpus

    base = stdlib_corpus()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_lm_") as tmp:
        for copies in args.copies:
            row = _measure(Path(tmp), copies, base, args.repeats)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(
        "| corpus | documents | MB | ours | floor (train + encode_batch) | ours / floor (≤ 1.5) "
        "| CPU time ours / floor | ours MB/s | dedup step MB/s | dedup alone MB/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| stdlib ×{r['copies']} | {r['documents']} | {r['mb']:.2f} | {r['ours_s']:.2f} s | "
            f"{r['floor_s']:.2f} s ({r['floor_train_s']:.2f} s training) | {r['ratio']:.2f} | {r['cpu_ratio']:.2f} | "
            f"{r['ours_mb_s']:.2f} | "
            f"{r['dedup_step_mb_s']} | {r['dedup_alone_mb_s']} |"
        )
    print()
    steps = list(rows[0]["ours_steps_s"]) if rows else []
    print("| corpus | " + " | ".join(steps) + " |")
    print("|---|" + "---|" * len(steps))
    for r in rows:
        print(
            f"| stdlib ×{r['copies']} | "
            + " | ".join(f"{r['ours_steps_s'].get(s, 0):.3f}" for s in steps)
            + " |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

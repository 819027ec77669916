"""Benchmark: our dedup + encode + pack side by side with datatrove's MinHash dedup + DocumentTokenizer.

Both sides deduplicate and tokenize the same corpus (``bench_lm_prepare.build_corpus``: the
standard library's documentation in varied copies) with the same number of workers and the same
``tokenizer.json``, one end-of-text token (``<|endoftext|>``) after each document:

* **ours**: ``OrderedLMDataModule.prepare_data`` with ``num_proc=workers`` in a fresh process
  (``bench_lm_prepare``'s own runner); our time is the ``dedup`` + ``encode`` + ``pack`` seconds
  of the ledger (exact + MinHash near-duplicates, word 5-grams, 256 permutations in 32 bands of 8,
  threshold 0.8 confirmed by exact Jaccard; ids with end-of-text; blocks). ``load``, ``clean``,
  ``split`` and ``build_vocab`` are not counted; ``load`` + ``clean`` are reported beside, and a
  second ratio counts them, since datatrove's stages read their Parquet input themselves.
* **datatrove**, in a subprocess of the interpreter given by ``--datatrove-python`` (datatrove
  is not a dependency of the package): its four MinHash stages (signatures, buckets, clusters,
  filter writing the kept documents as Parquet) and its ``DocumentTokenizer`` on their output,
  each a ``LocalPipelineExecutor(tasks=workers, workers=workers)`` (the buckets stage runs one
  task per bucket, the clusters stage one task: datatrove's own constraints); 5-grams, 32 buckets
  of 8 hashes, 64-bit xxhash; the tokenizer is our trained ``tokenizer.json``, with
  ``eos_token="<|endoftext|>"``, no document shuffling. The corpus is first cut into ``workers``
  Parquet files (untimed), as datatrove shards its input by file. Its time is the wall time of
  the five ``executor.run()`` calls, timed inside the subprocess (the interpreter's start-up and
  imports are not counted; each stage's worker pool start-up is).

The result: seconds each side, ours / datatrove, documents each dedup removed (the definitions
differ), tokens each side produced, MB/s per worker (corpus MB / seconds / workers) and the peak
resident memory of each process tree (ours: the whole ``prepare_data``).

Set-up (once; a venv of its own, never the project's)::

    python -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install "datatrove[processing]" pyarrow spacy

Usage::

    python benchmarks/bench_datatrove.py --megabytes 20 --workers 2 --json /tmp/bench_datatrove.json

``--results`` writes ``benchmarks/results/datatrove.json`` (the figures the docs quote, datatrove's
version and the load average before and after beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_lm_prepare as lm  # build_corpus, _run (ours in a fresh process), run_sampled
from figures import command_line, write_results

EOS_TOKEN = "<|endoftext|>"
N_GRAMS, BUCKETS, HASHES_PER_BUCKET = 5, 32, 8
OUR_STEPS = ("dedup", "encode", "pack")
OUR_READ_STEPS = ("load", "clean")
DEFAULT_DATATROVE_PYTHON = "/tmp/dtvenv/bin/python"
SETUP = 'python -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install "datatrove[processing]" pyarrow spacy'


# -- ours --------------------------------------------------------------------------------------
def run_ours(corpus: Path, cache: Path, workers: int, engine: str) -> dict[str, Any]:
    """Our ``prepare_data`` in a fresh process; the steps' seconds and counts from its ledger."""
    from lightning_order.ledger import StepLedger

    options = {"--data": corpus, "--cache": cache, "--num-proc": workers, "--engine": engine}
    run = lm._run(["--worker", "ours", *(x for kv in options.items() for x in map(str, kv))])
    ledger = StepLedger.load(Path(run["cache"]))
    steps = {r.step: float(r.stats.get("seconds", 0.0)) for r in ledger.records}
    clean, dedup, encode = (ledger.latest(s).stats for s in ("clean", "dedup", "encode"))
    return {
        "seconds": sum(steps[s] for s in OUR_STEPS),
        "read_seconds": sum(steps[s] for s in OUR_READ_STEPS),
        "prepare_seconds": run["seconds"],
        "steps": steps,
        "documents_in": int(clean["rows_in"]),
        "dropped_by_clean": int(clean["rows_in"]) - int(clean["rows"]),
        "exact_removed": int(dedup["exact_removed"]),
        "near_removed": int(dedup["near_removed"]),
        "removed": int(dedup["exact_removed"]) + int(dedup["near_removed"]),
        "documents_kept": int(dedup["rows"]),
        "tokens": int(encode["train_tokens"]) + int(encode.get("val_tokens", 0)),
        "eos_tokens": int(encode["eos_tokens"]),
        "peak_rss_mb": run["peak_rss_mb"],
        "cache": run["cache"],
    }


# -- datatrove: the parent's side ------------------------------------------------------------
def write_shards(corpus: Path, folder: Path, count: int) -> int:
    """The corpus cut into ``count`` Parquet files of consecutive rows (datatrove shards by file); its rows."""
    import pyarrow.parquet as pq

    table = pq.read_table(corpus, columns=["text"])
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-table.num_rows // count)
    for i in range(count):
        pq.write_table(table.slice(i * size, size), folder / f"{i:05d}.parquet")
    return table.num_rows


def run_datatrove(
    python: str, shards: Path, work: Path, tokenizer: Path, workers: int, fused: bool
) -> dict[str, Any]:
    """datatrove's stages in a subprocess of ``python``, one tokenizer thread per worker (as ours)."""
    command = [python, __file__, "--worker", "datatrove", "--shards", str(shards), "--work", str(work)]
    command += ["--tokenizer", str(tokenizer), "--workers", str(workers)] + (["--fused"] if fused else [])
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    return lm.run_sampled(command, env)


# -- datatrove: inside its own interpreter ------------------------------------------------------
def _datatrove_stages(
    shards: Path, work: Path, tokenizer: Path, workers: int, fused: bool
) -> list[tuple[str, list[Any], int]]:
    """``(name, pipeline, tasks)`` of each stage, as datatrove's MinHash example chains them."""
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
    )
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.hashing import HashConfig

    config = MinhashConfig(
        n_grams=N_GRAMS,
        num_buckets=BUCKETS,
        hashes_per_bucket=HASHES_PER_BUCKET,
        hash_config=HashConfig(precision=64, hash_fc="xxhash"),
    )

    def reader(folder: Path) -> Any:
        return ParquetReader(str(folder), glob_pattern="*.parquet")

    def tokenize() -> Any:
        return DocumentTokenizer(
            output_folder=str(work / "tokens"),
            tokenizer_name_or_path=str(tokenizer),
            eos_token=EOS_TOKEN,
            shuffle_documents=False,
        )

    sigs, dups, removals = work / "signatures", work / "buckets", work / "remove_ids"
    stages = [
        ("signatures", [reader(shards), MinhashDedupSignature(str(sigs), config=config)], workers),
        ("buckets", [MinhashDedupBuckets(str(sigs), str(dups), config=config)], BUCKETS),
        ("clusters", [MinhashDedupCluster(str(dups), str(removals), config=config)], 1),
    ]
    if fused:
        filtered = [reader(shards), MinhashDedupFilter(str(removals)), tokenize()]
        return [*stages, ("filter+tokenize", filtered, workers)]
    kept = work / "deduplicated"
    filtered = [reader(shards), MinhashDedupFilter(str(removals)), ParquetWriter(str(kept))]
    return [*stages, ("filter", filtered, workers), ("tokenize", [reader(kept), tokenize()], workers)]


def _token_counts(folder: Path) -> tuple[int, int]:
    """``(documents, tokens)`` of the tokenizer's output, from its index files (uint64 document ends)."""
    documents = tokens = 0
    for index in sorted(folder.glob("*.ds.index")):
        ends = array("Q")
        ends.frombytes(index.read_bytes())
        documents += len(ends)
        tokens += ends[-1] if ends else 0
    return documents, tokens


def _dropped(logs: Path) -> int:
    """Documents MinhashDedupFilter dropped, from the stage's ``stats.json``."""
    for step in json.loads((logs / "stats.json").read_text()):
        if "MinHash stage 4" in step.get("name", ""):
            dropped = step["stats"].get("dropped", 0)
            return int(dropped.get("total", 0) if isinstance(dropped, dict) else dropped)
    return -1


def datatrove_worker(shards: Path, work: Path, tokenizer: Path, workers: int, fused: bool) -> dict[str, Any]:
    """Runs every stage in turn, each timed by its ``executor.run()``."""
    from datatrove.executor import LocalPipelineExecutor

    seconds: dict[str, float] = {}
    for name, pipeline, tasks in _datatrove_stages(shards, work, tokenizer, workers, fused):
        executor = LocalPipelineExecutor(
            pipeline=pipeline, tasks=tasks, workers=min(workers, tasks), logging_dir=str(work / "logs" / name)
        )
        start = time.perf_counter()
        executor.run()
        seconds[name] = time.perf_counter() - start
    documents, tokens = _token_counts(work / "tokens")
    filter_stage = "filter+tokenize" if fused else "filter"
    return {
        "seconds": sum(seconds.values()),
        "stages": seconds,
        "documents_kept": documents,
        "tokens": tokens,
        "filter_dropped": _dropped(work / "logs" / filter_stage),
    }


# -- the comparison ------------------------------------------------------------------------------
def corpus_megabytes(corpus: Path) -> float:
    """MB of UTF-8 text in the corpus (what MB/s counts)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    text = pq.read_table(corpus, columns=["text"]).column("text")
    return pc.sum(pc.binary_length(text.cast("large_binary"))).as_py() / 1e6


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Ours and datatrove, alternating, ``--repeats`` times each; the fastest run of each side."""
    corpus = lm.build_corpus(args.data_dir, args.megabytes)
    mb = corpus_megabytes(corpus)
    ours_runs, theirs_runs = [], []
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        shards = Path(tmp) / "shards"
        rows = write_shards(corpus, shards, args.workers)
        for repeat in range(args.repeats):
            ours = run_ours(corpus, Path(tmp) / f"ours{repeat}", args.workers, args.engine)
            ours_runs.append(ours)
            print(f"  ours: {ours['seconds']:.1f} s (dedup + encode + pack)", file=sys.stderr, flush=True)
            tokenizer = Path(ours_runs[0]["cache"]) / "tokenizer.json"
            work = Path(tmp) / f"datatrove{repeat}"
            theirs = run_datatrove(args.datatrove_python, shards, work, tokenizer, args.workers, args.fused)
            theirs_runs.append(theirs)
            print(f"  datatrove: {theirs['seconds']:.1f} s {theirs['stages']}", file=sys.stderr, flush=True)
    ours, theirs = min(ours_runs, key=lambda r: r["seconds"]), min(theirs_runs, key=lambda r: r["seconds"])
    theirs["documents_in"] = rows
    theirs["removed"] = rows - theirs["documents_kept"]
    return {
        "megabytes": round(mb, 2),
        "workers": args.workers,
        "engine": args.engine,
        "fused": args.fused,
        "repeats": args.repeats,
        "ours": ours,
        "datatrove": theirs,
        "ours_runs_seconds": [r["seconds"] for r in ours_runs],
        "datatrove_runs_seconds": [r["seconds"] for r in theirs_runs],
        "ours_over_datatrove": ours["seconds"] / theirs["seconds"],
        "ours_with_read_over_datatrove": (ours["seconds"] + ours["read_seconds"]) / theirs["seconds"],
        "tokens_ours_over_datatrove": ours["tokens"] / theirs["tokens"],
        "ours_mb_s_per_worker": mb / ours["seconds"] / args.workers,
        "datatrove_mb_s_per_worker": mb / theirs["seconds"] / args.workers,
    }


def report(r: dict[str, Any]) -> None:
    """The table."""
    ours, theirs = r["ours"], r["datatrove"]
    print(f"\n{r['megabytes']:.1f} MB, {r['workers']} workers, best of {r['repeats']}")
    print(
        f"{'':>11} {'seconds':>8} {'MB/s/worker':>12} {'docs in':>8} {'removed':>8} {'kept':>7} {'tokens':>11} {'peak MB':>8}"
    )
    for name, side, mbs in (
        ("ours", ours, r["ours_mb_s_per_worker"]),
        ("datatrove", theirs, r["datatrove_mb_s_per_worker"]),
    ):
        print(
            f"{name:>11} {side['seconds']:>8.2f} {mbs:>12.2f} {side['documents_in']:>8} {side['removed']:>8} "
            f"{side['documents_kept']:>7} {side['tokens']:>11} {side['peak_rss_mb']:>8.0f}"
        )
    steps = ", ".join(f"{s} {ours['steps'][s]:.2f}" for s in (*OUR_READ_STEPS, *OUR_STEPS))
    stages = ", ".join(f"{s} {v:.2f}" for s, v in theirs["stages"].items())
    print(f"ours / datatrove: {r['ours_over_datatrove']:.2f} (target <= 1.0)")
    print(f"ours with load + clean / datatrove: {r['ours_with_read_over_datatrove']:.2f}")
    print(f"tokens ours / datatrove: {r['tokens_ours_over_datatrove']:.4f}")
    print(f"ours, s: {steps} (exact removed {ours['exact_removed']}, near {ours['near_removed']})")
    print(f"datatrove, s: {stages} (filter dropped {theirs['filter_dropped']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--megabytes", type=float, default=20, help="corpus size, MB of text")
    parser.add_argument(
        "--workers", type=int, default=2, help="ours' num_proc, datatrove's tasks and workers"
    )
    parser.add_argument("--engine", default="local", choices=["local", "ray"], help="our engine")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each side, alternating; the fastest kept"
    )
    parser.add_argument(
        "--fused",
        action="store_true",
        help="datatrove: filter and tokenize in one stage (no Parquet in between)",
    )
    parser.add_argument("--datatrove-python", default=DEFAULT_DATATROVE_PYTHON)
    parser.add_argument(
        "--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "lightning_order_bench"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/datatrove.json, the figures the docs quote"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--shards", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "datatrove":
        result = datatrove_worker(args.shards, args.work, args.tokenizer, args.workers, args.fused)
        print("RESULT " + json.dumps(result), flush=True)
        return
    if not Path(args.datatrove_python).exists():
        sys.exit(f"no datatrove interpreter at {args.datatrove_python}; create it with: {SETUP}")
    load = os.getloadavg()[0]
    result = measure(args)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.results:
        result["load"] = {"before": load, "after": os.getloadavg()[0]}
        for side in ("ours", "datatrove"):
            result[side].pop("cache", None)  # a temporary folder, gone
        version = subprocess.run(
            [args.datatrove_python, "-c", "import importlib.metadata as m; print(m.version('datatrove'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        result["datatrove_version"] = version
        print(f"wrote {write_results('datatrove', result, command_line())}")


if __name__ == "__main__":
    main()

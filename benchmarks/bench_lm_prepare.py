"""Benchmark: the streaming ``OrderedLMDataModule.prepare_data`` against the floor, with peak memory.

The floor is the work no LM data pipeline can skip: read the text, train the same byte-level BPE
(same pre-tokenizer, vocabulary size and special token) on the same tokenizer sample, and
``encode_batch`` every document, with both cores (tokenizers' own Rust threads). Ours does that
and everything the floor does not: cleaning, keying and partitioning, exact + near-duplicate
removal across partitions, the split, packing, the ledger, the cache folder (written, hashed,
published atomically). The floor's inputs are ours exactly, taken from our cache untimed: the
sampled train documents and the kept documents; the floor's tokenizer must equal ours.

The corpus: the standard library's documentation (:func:`~lightning_order.data.lm.corpus.stdlib_corpus`,
about 1.1 MB) repeated with varied words until the size asked for (each extra copy swaps 30 % of
the vocabulary for other words of it, so no copy is a near-duplicate of another and dedup cannot
make the work smaller), written once as Parquet under ``--data-dir`` and reused.

Each side runs in its own process, timed alone: nothing else runs on the machine meanwhile. Its
peak memory is what the kernel recorded (``getrusage``: the main process, and the largest of its
workers). ``--memory-only`` runs ours alone and samples its whole process tree every 50 ms (the
sum of the resident sets, and the PSS); that sampler reads ``/proc`` and every process's
``smaps_rollup`` and takes CPU and the processes' memory-map locks, so its runs are not the timed
ones.

Usage::

    python benchmarks/bench_lm_prepare.py [--sizes 250 1000] [--num-proc 2] [--repeats 3] [--json out.json] [--results]

Prints one JSON line per size and a summary table. ``--results`` writes
``benchmarks/results/lm_prepare.json`` (``lm_prepare_ray.json`` with ``--engines local ray``,
``lm_prepare_memory.json`` with ``--memory-only``; keys
``<size MB>.<figure>``, and the load average before and after), the figures the docs quote.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from figures import command_line, write_results

VOCAB_SIZE = 8000
BLOCK_SIZE = 256
_WORD = re.compile(r"[a-z]+")


def varied_copies(documents: list[str], copy: int, *, swap: float = 0.3) -> list[str]:
    """Copy ``copy`` of ``documents`` (0: themselves) with a random ``swap`` share of the vocabulary permuted."""
    if copy == 0:
        return list(documents)
    vocab = sorted({w for d in documents for w in _WORD.findall(d)})
    rng = random.Random(copy)
    chosen = rng.sample(vocab, int(len(vocab) * swap))
    shuffled = chosen[:]
    rng.shuffle(shuffled)
    table = dict(zip(chosen, shuffled))
    return [_WORD.sub(lambda m: table.get(m.group(0), m.group(0)), d) for d in documents]


def build_corpus(folder: Path, megabytes: float) -> Path:
    """The varied corpus of about ``megabytes`` of text as Parquet (built once, streamed: bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lightning_order.data.lm.corpus import stdlib_corpus

    path = folder / f"corpus_{int(megabytes)}mb.parquet"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    base = stdlib_corpus()
    tmp = path.with_suffix(".tmp")
    writer, total, copy = None, 0, 0
    while total < megabytes * 1e6:
        docs = varied_copies(base, copy)
        table = pa.table({"text": pa.array(docs, pa.large_string())})
        writer = writer or pq.ParquetWriter(str(tmp), table.schema)
        writer.write_table(table)
        total += sum(len(d.encode("utf-8")) for d in docs)
        copy += 1
    writer.close()
    os.replace(tmp, path)
    return path


# -- memory of a process tree ---------------------------------------------------------------------
def _tree_rss(root: int) -> tuple[int, int]:
    """``(sum of the resident sets of root and its descendants, root's own)`` in bytes (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total, rss.get(root, 0)


def _tree_pids(root: int) -> list[int]:
    """``root`` and its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def _tree_pss(root: int) -> int:
    """The proportional set size of ``root``'s process tree in bytes: pages shared by forked
    workers counted once in all (``Pss`` of ``/proc/<pid>/smaps_rollup``), unlike summed RSS."""
    total = 0
    for pid in _tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


def _run(args: list[str]) -> dict:
    """Runs this script as a worker, its process tree sampled for memory; its result and peak memory."""
    return run_sampled([sys.executable, __file__, *args])


def _run_timed(args: list[str]) -> dict:
    """Runs this script as a worker, alone and unsampled (a timed run); its result."""
    command = [sys.executable, __file__, *args]
    proc = subprocess.run(command, capture_output=True, text=True)
    return _result(command, proc.returncode, proc.stdout, proc.stderr)


def _result(command: list[str], returncode: int, out: str, err: str) -> dict:
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if returncode or line is None:
        raise RuntimeError(f"{command[1:4]} failed (rc {returncode}):\n{out[-2000:]}\n{err[-4000:]}")
    return json.loads(line[len("RESULT ") :])


def run_sampled(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Runs ``command``; its ``RESULT`` line with the peak memory of its process tree (RSS of the
    tree and of the main process, PSS of the tree), sampled every 50 ms."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = {"tree": 0, "main": 0, "pss": 0}

    def sample() -> None:
        while proc.poll() is None:
            tree, main = _tree_rss(proc.pid)
            peak["tree"], peak["main"] = max(peak["tree"], tree), max(peak["main"], main)
            peak["pss"] = max(peak["pss"], _tree_pss(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    result = _result(command, proc.returncode, out, err)
    result.update(
        peak_rss_mb=peak["tree"] / 1e6, peak_rss_main_mb=peak["main"] / 1e6, peak_pss_mb=peak["pss"] / 1e6
    )
    return result


def _own_peaks() -> dict:
    """This process's peak RSS and its largest finished child's (the kernel's record), in MB."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"peak_rss_main_mb": own.ru_maxrss / 1024, "peak_rss_largest_worker_mb": children.ru_maxrss / 1024}


def _cpu() -> float:
    """CPU seconds of this process and its finished children, every thread included."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# -- the two sides ---------------------------------------------------------------------------------
def _ours(data: str, cache: str, num_proc: int, engine: str) -> dict:
    os.environ["LIGHTNING_ORDER_PROGRESS"] = "0"
    from lightning_order import OrderedLMDataModule

    start, cpu = time.perf_counter(), _cpu()
    if engine == "ray":  # Ray's own start-up, reported apart (the engine attaches to this Ray)
        import ray

        ray.init(address="local", num_cpus=num_proc, include_dashboard=False, log_to_driver=False)
    ray_startup = time.perf_counter() - start
    start, cpu = time.perf_counter(), _cpu()
    dm = OrderedLMDataModule(
        "parquet",
        data_files=data,
        vocab_size=VOCAB_SIZE,
        block_size=BLOCK_SIZE,
        cache_dir=cache,
        num_proc=num_proc,
        engine=engine,
    )
    identified = time.perf_counter() - start
    dm.prepare_data()
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    steps = {r.step: round(r.stats.get("seconds", 0.0), 2) for r in dm.ledger.records}
    return {
        "seconds": elapsed,
        "cpu": cpu,
        "identify_inputs_seconds": identified,
        "steps": steps,
        "cache": str(dm.cache_path),
        "dedup": {k: dm.ledger.latest("dedup").stats[k] for k in ("exact_removed", "near_removed", "rows")},
        "sample": {k: dm.ledger.latest("build_vocab").stats[k] for k in ("sample_documents", "sample_bytes")},
        "partitions": dm.ledger.latest("load").params["partitions"],
        "fingerprints": dm.data_fingerprints(),
        "ray_startup_seconds": ray_startup if engine == "ray" else None,
        **_own_peaks(),
    }


def _floor(data: str, sample: str, documents: str) -> dict:
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # both cores, through tokenizers' own threads
    import pyarrow.parquet as pq

    from lightning_order.data.lm.tokenizer import train_byte_bpe  # HF's BpeTrainer with our settings

    start, cpu = time.perf_counter(), _cpu()
    raw = pq.read_table(data, columns=["text"]).column("text").to_pylist()  # read the text, as ours does
    del raw
    texts = pq.read_table(sample).column("text").to_pylist()
    tokenizer = train_byte_bpe(texts, VOCAB_SIZE)
    trained = time.perf_counter() - start
    tokens = 0
    for batch in pq.ParquetFile(documents).iter_batches(batch_size=4096, columns=["text"]):
        encodings = tokenizer.encode_batch_fast(batch.column(0).to_pylist(), add_special_tokens=False)
        tokens += sum(len(e.ids) for e in encodings)
    elapsed, cpu = time.perf_counter() - start, _cpu() - cpu
    return {
        "seconds": elapsed,
        "cpu": cpu,
        "train_seconds": trained,
        "tokens": tokens,
        "tokenizer": tokenizer.to_str(),
        **_own_peaks(),
    }


def _floor_inputs(cache: Path, folder: Path) -> tuple[Path, Path]:
    """Our tokenizer sample and our kept documents, as the floor's Parquet inputs (untimed)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lightning_order.data.lm.vocab import sample_threshold
    from lightning_order.ledger import StepLedger

    ledger = StepLedger.load(cache)
    files = {s: sorted((cache / s / "documents").glob("part-*.arrow")) for s in ("train", "val")}
    import xxhash

    from lightning_order.data.engine.partitions import read_table
    from lightning_order.data.lm.tasks import SAMPLE_SEED

    train = [t for f in files["train"] for t in read_table(f, ["text"]).column("text").to_pylist()]
    encoded = [t.encode("utf-8", "surrogatepass") for t in train]
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(b, seed=SAMPLE_SEED) for b in encoded), np.uint64, len(train)
    )
    sizes = np.fromiter(map(len, encoded), np.int64, len(train))
    cap = ledger.latest("build_vocab").params["tokenizer_train_bytes"]
    threshold, count, _ = sample_threshold(hashes, sizes, cap)
    sample = [t for t, h in zip(train, hashes) if h <= np.uint64(threshold)]
    assert len(sample) == count == ledger.latest("build_vocab").stats["sample_documents"]
    sample_path, docs_path = folder / "sample.parquet", folder / "documents.parquet"
    pq.write_table(pa.table({"text": pa.array(sample, pa.large_string())}), sample_path)
    writer = None
    for split in ("train", "val"):
        for f in files[split]:
            table = read_table(f, ["text"])
            writer = writer or pq.ParquetWriter(str(docs_path), table.schema)
            writer.write_table(table)
    writer.close()
    return sample_path, docs_path


def _ours_args(corpus: Path, cache: Path, num_proc: int, engine: str) -> list[str]:
    options = {"--data": corpus, "--cache": cache, "--num-proc": num_proc, "--engine": engine}
    return ["--worker", "ours", *(str(x) for pair in options.items() for x in pair)]


def measure(
    megabytes: float,
    data_dir: Path,
    num_proc: int,
    engines: tuple[str, ...] = ("local",),
    repeats: int = 1,
) -> dict:
    """Ours (on each engine) and the floor on the corpus of ``megabytes``, each in its own process.

    With ``repeats`` > 1 the two sides alternate (ours, floor, ours, floor, ...), and each side's
    fastest run is the one compared (the least disturbed by the machine's noise); every run's
    seconds and each pair's ratio are reported too.
    """
    corpus = build_corpus(data_dir, megabytes)
    runs: dict[str, list[dict]] = {engine: [] for engine in engines}
    floors: list[dict] = []
    with tempfile.TemporaryDirectory(dir=data_dir) as tmp:
        first: Path | None = None
        for repeat in range(repeats):
            for engine in engines:
                cache = Path(tmp) / f"{engine}-{repeat}"
                run = _run_timed(_ours_args(corpus, cache, num_proc, engine))
                runs[engine].append(run)
                print(f"  ours ({engine}): {run['seconds']:.1f} s", file=sys.stderr, flush=True)
                if first is None:
                    first = Path(run["cache"])
                    sample, docs = _floor_inputs(first, Path(tmp))
                else:
                    shutil.rmtree(cache)
            floors.append(
                _run_timed(
                    ["--worker", "floor", "--data", str(corpus), "--sample", str(sample), "--docs", str(docs)]
                )
            )
            print(f"  floor: {floors[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
        ours_tokenizer = json.loads((first / "tokenizer.json").read_text())
        same = all(json.loads(f.pop("tokenizer")) == ours_tokenizer for f in floors)
        prints = {json.dumps(r["fingerprints"], sort_keys=True) for found in runs.values() for r in found}
    import pyarrow.parquet as pq

    mb = (
        pq.read_metadata(corpus).num_rows
        and sum(len(t.encode()) for t in pq.read_table(corpus).column("text").to_pylist()) / 1e6
    )
    fastest = {engine: min(found, key=lambda r: r["seconds"]) for engine, found in runs.items()}
    ours, floor = fastest[engines[0]], min(floors, key=lambda r: r["seconds"])
    pairs = [o["seconds"] / f["seconds"] for o, f in zip(runs[engines[0]], floors)]
    return {
        "megabytes": round(mb, 1),
        "num_proc": num_proc,
        "engines": list(engines),
        "repeats": repeats,
        "ours": ours,
        "by_engine": fastest,
        "ours_seconds": [round(r["seconds"], 1) for r in runs[engines[0]]],
        "floor_seconds": [round(f["seconds"], 1) for f in floors],
        "pair_ratios": [round(x, 3) for x in pairs],
        "engines_prepare_identical_data": len(prints) == 1,
        "floor": floor,
        "same_tokenizer": same,
        "ours_over_floor": ours["seconds"] / floor["seconds"],
        # each other engine's fastest run against the first engine's (``ray_over_local``)
        **{f"{e}_over_{engines[0]}": fastest[e]["seconds"] / ours["seconds"] for e in engines[1:]},
        "ours_mb_s_per_core": mb / ours["cpu"],
        "floor_mb_s_per_core": mb / floor["cpu"],
    }


def memory(args: argparse.Namespace) -> None:
    """Ours alone at each size: seconds, peak RSS (tree, main) and PSS, each against the first size."""
    load = os.getloadavg()[0]
    rows = []
    for size in args.sizes:
        corpus = build_corpus(args.data_dir, size)
        with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
            run = _run(
                [
                    "--worker",
                    "ours",
                    "--data",
                    str(corpus),
                    "--cache",
                    str(Path(tmp) / "ours"),
                    "--num-proc",
                    str(args.num_proc),
                    "--engine",
                    args.engines[0],
                ]
            )
        rows.append({"megabytes": size, **{k: v for k, v in run.items() if k != "cache"}})
        print(json.dumps(rows[-1]), flush=True)
    first = rows[0]
    print(
        f"\n{'MB':>7} {'ours s':>8} {'RSS tree MB':>12} {'RSS main MB':>12} {'PSS tree MB':>12} {'PSS / first':>12}"
    )
    for r in rows:
        print(
            f"{r['megabytes']:>7.0f} {r['seconds']:>8.1f} {r['peak_rss_mb']:>12.0f} {r['peak_rss_main_mb']:>12.0f} "
            f"{r['peak_pss_mb']:>12.0f} {r['peak_pss_mb'] / first['peak_pss_mb']:>12.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        _write("lm_prepare_memory", rows, load)


def _write(name: str, rows: list[dict], load: float) -> None:
    """``benchmarks/results/<name>.json``: each size's figures, its peak or the first size's, and the load."""
    figures: dict = {f"{r['megabytes']:g}": r for r in rows}
    if "peak_pss_mb" in rows[0]:  # --memory-only: the growth against the first size
        figures["growth"] = {
            f"{r['megabytes']:g}": {
                "peak_rss_mb": r["peak_rss_mb"] / rows[0]["peak_rss_mb"],
                "peak_pss_mb": r["peak_pss_mb"] / rows[0]["peak_pss_mb"],
            }
            for r in rows[1:]
        }
    figures["load"] = {"before": load, "after": os.getloadavg()[0]}
    print(f"wrote {write_results(name, figures, command_line())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--sizes", type=float, nargs="+", default=[250, 1000], help="corpus sizes, MB of text"
    )
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--engine", default="local", choices=["local", "ray"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--engines",
        nargs="+",
        default=["local"],
        choices=["local", "ray"],
        help="ours on each (the first is compared with the floor)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "lightning_order_bench"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each side, alternating; each side's fastest is compared (the machine's noise)",
    )
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="ours alone at each size (no floor): peak memory and its growth against the first size",
    )
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/lm_prepare.json (lm_prepare_memory.json), the figures the docs quote",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--sample", help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "ours":
        print("RESULT " + json.dumps(_ours(args.data, args.cache, args.num_proc, args.engine)))
        return
    if args.worker == "floor":
        print("RESULT " + json.dumps(_floor(args.data, args.sample, args.docs)))
        return
    if args.memory_only:
        memory(args)
        return
    load = os.getloadavg()[0]
    results = []
    for size in args.sizes:
        result = measure(size, args.data_dir, args.num_proc, tuple(args.engines), args.repeats)
        results.append(result)
        print(json.dumps(result), flush=True)
    print(
        f"\n{'MB':>7} {'ours s':>8} {'floor s':>8} {'ratio':>6} {'main MB':>8} {'worker MB':>9} {'MB/s/core':>10}"
    )
    for r in results:
        print(
            f"{r['megabytes']:>7.0f} {r['ours']['seconds']:>8.1f} {r['floor']['seconds']:>8.1f} "
            f"{r['ours_over_floor']:>6.2f} {r['ours']['peak_rss_main_mb']:>8.0f} {r['ours']['peak_rss_largest_worker_mb']:>9.0f} "
            f"{r['ours_mb_s_per_core']:>10.2f}"
        )
        for engine, run in r["by_engine"].items():
            startup = (
                f", Ray start-up {run['ray_startup_seconds']:.1f} s apart"
                if run["ray_startup_seconds"]
                else ""
            )
            print(f"        {engine}: {run['seconds']:.1f} s{startup}, steps {run['steps']}")
        if r["repeats"] > 1:
            print(
                f"        ours {r['ours_seconds']} s, floor {r['floor_seconds']} s, each pair's ratio {r['pair_ratios']}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.results:  # another engine's comparison is another file: it never replaces the local one's
        _write("_".join(["lm_prepare", *args.engines[1:]]), results, load)


if __name__ == "__main__":
    main()

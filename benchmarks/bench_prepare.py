"""Benchmark: ``OrderedDataModule.prepare_data`` beside the floor and a hand-written reference, in one run.

Three sides start from the same Parquet file of the demo corpus (written first, untimed), each in a
fresh process, alternating (floor, reference, ours) ``--repeats`` times; the fastest run of each
counts, and the highest peak memory:

* **ours**: ``OrderedDataModule("parquet", ...).prepare_data()``: load, clean, engineer features,
  split by a hash of the cleaned text's word sequence, fit mean/std on the train split, train a
  WordPiece vocabulary (8000) on the train text, encode (ids, mask, standardised features,
  labels, key hashes; ``max_length`` 128), write the cache and its verified manifest.
* **reference**: the same work written by hand with ``datasets.map`` and ``tokenizers``, as a
  careful engineer would, with no ledger, cache, lock or checks.
* **floor**: the work that cannot be avoided: read the text column, train the same tokenizer
  (``train_tokenizer``: the same pre-tokenizer, trainer and alphabet) on the same train rows, and
  ``encode_batch`` every row with the same padding and truncation; nothing else (no cleaning, no
  features, no writing). Its input is the *cleaned* text with the train flag, prepared untimed, so
  it tokenizes exactly the text ours tokenizes.

A last run repeats our ``prepare_data`` on the finished cache (the cached case). Our best run's
ledger gives the time of each step (``stats.seconds``).

Usage::

    python benchmarks/bench_prepare.py --sizes-mb 50 200 [--repeats 2] [--num-proc N] [--workdir DIR] [--results]

Prints one JSON line per size and a summary: ours/floor (target <= 1.5), ours/reference (target
<= 0.7), the cached run's time (target <= 1 s), peak anonymous memory of each side, the load
average (``os.getloadavg``) before each size, ours' per-step times, and each side's CPU seconds
(user + system, all threads: steadier than wall time on a shared machine); besides the fastest of
each side, ours / floor of each repeat's pair (wall and CPU: median and range) and the time of
ours' ``load`` step in every run. ``--results`` writes ``benchmarks/results/prepare.json`` (keys
``<size MB>.<figure>``: ``50.ours_over_floor``, ``50.ours_steps_s.encode``), the figures the docs quote.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figures import command_line, write_results

_BYTES_PER_ROW = 187  # mean text length of the demo corpus, measured
_WORD = re.compile(r"\w+")


def _words(text: str) -> str:
    """The reference's split key: the cleaned text's lower-cased word sequence, as ours uses."""
    return " ".join(_WORD.findall(text.lower()))


def _write_corpus(path: Path, size_mb: float) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lightning_order.data.text.demo import demo_rows

    rows = int(size_mb * 1e6 / _BYTES_PER_ROW)
    writer = None
    chunk: list[dict] = []
    for row in demo_rows(rows, seed=0):
        chunk.append(row)
        if len(chunk) == 50000:
            table = pa.Table.from_pylist(chunk)
            writer = writer or pq.ParquetWriter(str(path), table.schema)
            writer.write_table(table)
            chunk = []
    if chunk:
        table = pa.Table.from_pylist(chunk)
        writer = writer or pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table)
    writer.close()
    return rows


def _write_floor_input(data: Path, out: Path) -> None:
    """The floor's input: the cleaned text and whether the row is in the train split (untimed)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from lightning_order.data.engine.keys import key_hash_array
    from lightning_order.data.text.arrow import clean_array

    text = clean_array(pq.read_table(str(data), columns=["text"])["text"].combine_chunks())
    text = text.filter(pc.greater(pc.utf8_length(text), 0))
    val = (key_hash_array(text, text=True, seed=0) % (1 << 20)).astype(np.int64) < round(0.1 * (1 << 20))
    pq.write_table(pa.table({"text": text, "is_train": pa.array(~val)}), str(out))


# -- the three sides, each run in its own process -----------------------------------------------
def _ours(data: str, cache: str, num_proc: int) -> dict:
    from lightning_order import OrderedDataModule

    dm = OrderedDataModule(
        "parquet",
        data_files=data,
        numeric_columns=["ratio", "score", "amount"],
        vocab_size=8000,
        max_length=128,
        num_proc=num_proc or None,
        cache_dir=cache,
    )
    start = time.perf_counter()
    dm.prepare_data()
    elapsed = time.perf_counter() - start
    steps = {r.step: r.stats.get("seconds") for r in dm.ledger}
    return {"seconds": elapsed, "dims": dm.dims, "steps": steps}


def _floor(data: str, out: str, num_proc: int) -> dict:
    import datasets
    import pyarrow.parquet as pq

    from lightning_order.data.text.vocab import text_alphabet, train_tokenizer

    start = time.perf_counter()
    table = pq.read_table(data, columns=["text", "is_train"])
    texts = table["text"].combine_chunks()
    train = texts.filter(table["is_train"].combine_chunks())
    alphabet = text_alphabet(
        datasets.Dataset(datasets.table.InMemoryTable(table.filter(table["is_train"]))), "text"
    )

    def batches(array, size):
        return (array.slice(i, size).to_pylist() for i in range(0, len(array), size))

    tokenizer = train_tokenizer(lambda: batches(train, 2048), 8000, "wordpiece", len(train), alphabet)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=128)
    tokenizer.enable_truncation(max_length=128)
    for batch in batches(texts, 8192):
        tokenizer.encode_batch(batch, add_special_tokens=False)
    return {"seconds": time.perf_counter() - start}


def _reference(data: str, out: str, num_proc: int) -> dict:
    import datasets
    import numpy as np
    import xxhash
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from lightning_order.data.text.features import engineer_batch
    from lightning_order.data.text.normalise import clean_text

    numeric = ["ratio", "score", "amount"]
    names = [*numeric, "feat_chars", "feat_words", "feat_mean_word_len", "feat_punct"]
    nproc = num_proc if num_proc and num_proc > 1 else None
    start = time.perf_counter()
    work = Path(out) / "work"
    ds = datasets.load_dataset("parquet", data_files=data, split="train", cache_dir=str(work))

    def clean(batch):
        texts = [clean_text(t) for t in batch["text"]]
        keep = [i for i, t in enumerate(texts) if t]
        batch["text"] = texts
        return {k: [v[i] for i in keep] for k, v in batch.items()}

    ds = ds.map(clean, batched=True, num_proc=nproc, new_fingerprint="ref-clean")
    ds = ds.map(
        engineer_batch,
        batched=True,
        num_proc=nproc,
        new_fingerprint="ref-features",
        fn_kwargs={"text_column": "text", "numeric_columns": numeric},
    )
    flags, train_labels = [], set()
    for batch in ds.select_columns(["text", "label"]).iter(batch_size=10000):
        f = np.fromiter(
            (xxhash.xxh3_64_intdigest(_words(t).encode()) % 1000 < 100 for t in batch["text"]), bool
        )
        flags.append(f)
        train_labels.update(np.asarray(batch["label"])[~f].tolist())
    flag = np.concatenate(flags)
    # Written contiguously, as ours does: reading through an index mapping is slower and its memory grows.
    train = ds.select(np.flatnonzero(~flag)).flatten_indices(num_proc=nproc, new_fingerprint="ref-train")
    val = ds.select(np.flatnonzero(flag)).flatten_indices(num_proc=nproc, new_fingerprint="ref-val")
    count, total, total_sq = 0, np.zeros(len(names)), np.zeros(len(names))
    for batch in train.select_columns(names).with_format("arrow").iter(batch_size=65536):
        block = np.stack([np.asarray(batch[c].to_numpy(), dtype=np.float64) for c in names], axis=1)
        count += len(block)
        total += block.sum(0)
        total_sq += (block**2).sum(0)
    mean = total / count
    std = np.sqrt(total_sq / count - mean**2)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=8000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False
    )
    tokenizer.train_from_iterator(
        (b["text"] for b in train.select_columns(["text"]).iter(batch_size=2048)),
        trainer=trainer,
        length=len(train),
    )
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=128)
    tokenizer.enable_truncation(max_length=128)
    labels = {v: i for i, v in enumerate(sorted(train_labels))}

    def encode(batch):
        enc = tokenizer.encode_batch(batch["text"], add_special_tokens=False)
        feats = (np.stack([np.asarray(batch[c], dtype=np.float64) for c in names], axis=1) - mean) / std
        return {
            "input_ids": np.asarray([e.ids for e in enc], dtype=np.int32),
            "attention_mask": np.asarray([e.attention_mask for e in enc], dtype=np.int8),
            "features": feats.astype(np.float32),
            "labels": np.asarray([labels[v] for v in batch["label"]]),
            "key_hash": np.fromiter(
                (xxhash.xxh3_64_intdigest(_words(t).encode()) for t in batch["text"]), np.uint64
            ).view(np.int64),
        }

    for name, part in (("train", train), ("val", val)):
        part.map(
            encode,
            batched=True,
            num_proc=nproc,
            remove_columns=part.column_names,
            new_fingerprint=f"ref-encode-{name}",
        ).save_to_disk(f"{out}/{name}")
    tokenizer.save(f"{out}/tokenizer.json")
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": time.perf_counter() - start}


class _AnonPeak:
    """Samples this process's anonymous resident memory (``RssAnon``: heap, not mapped files).

    ``ru_maxrss`` also counts the pages of memory-mapped Arrow files that were read, which the
    kernel can drop at any time; ``RssAnon`` is the memory the process really holds.
    """

    def __init__(self, interval: float = 0.05) -> None:
        import threading

        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))
        except OSError:
            pass

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak_kb / 1024


def _worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    import datasets

    datasets.disable_progress_bars()
    # The same imports on both sides before the clock starts (datasets loads its builders lazily).
    import datasets.packaged_modules.parquet.parquet
    import pyarrow.parquet  # noqa: F401
    import tokenizers  # noqa: F401

    import lightning_order.data.text.datamodule  # noqa: F401

    anon = _AnonPeak()
    side = {"reference": _reference, "ours": _ours, "floor": _floor}[args.worker]
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = side(args.data, args.cache, args.num_proc)
    after = resource.getrusage(resource.RUSAGE_SELF)
    # CPU seconds of all the process's threads: steadier than wall time on a shared machine.
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["peak_anon_mb"] = anon.stop()
    print("RESULT " + json.dumps(result))


def _run(kind: str, data: Path, cache: Path, num_proc: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--data",
        str(data),
        "--cache",
        str(cache),
        "--num-proc",
        str(num_proc),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-4000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _best(data: Path, floor_data: Path, folder: Path, num_proc: int, repeats: int) -> dict[str, dict]:
    """Alternates floor, reference and our runs ``repeats`` times (a shared machine is noisy).

    Returns, per side: the fastest time, the highest peak memory, and (ours) the fastest run's
    per-step seconds.
    """
    runs: dict[str, list[dict]] = {"floor": [], "reference": [], "ours": []}
    for _ in range(repeats):
        for kind in runs:
            out = folder / {"floor": "floor", "reference": "reference", "ours": "cache"}[kind]
            shutil.rmtree(out, ignore_errors=True)
            runs[kind].append(_run(kind, floor_data if kind == "floor" else data, out, num_proc))
    best = {}
    for kind, results in runs.items():
        fastest = min(results, key=lambda r: r["seconds"])
        best[kind] = {
            "seconds": fastest["seconds"],
            "cpu_s": min(r["cpu_s"] for r in results),
            "all_seconds": [round(r["seconds"], 2) for r in results],
            "all_cpu_s": [round(r["cpu_s"], 2) for r in results],
            "all_load_s": [r["steps"]["load"] for r in results if r.get("steps")],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "peak_anon_mb": max(r["peak_anon_mb"] for r in results),
            "steps": fastest.get("steps"),
        }
    return best


def _pairs(ours: list[float], floor: list[float]) -> dict[str, object]:
    """Ours / floor of each repeat (the two ran minutes apart at most): every ratio, the median and the range."""
    ratios = sorted(round(o / f, 3) for o, f in zip(ours, floor))
    return {"each": ratios, "median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes-mb", type=float, nargs="+", default=[50, 200], help="corpus sizes, MB of text"
    )
    parser.add_argument(
        "--num-proc", type=int, default=0, help="processes for Dataset.map (0: ours' default, every CPU)"
    )
    parser.add_argument("--workdir", type=str, default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="alternate floor/reference/ours runs this many times; keep the fastest",
    )
    parser.add_argument(
        "--results", action="store_true", help="write benchmarks/results/prepare.json, the figures the docs quote"
    )
    parser.add_argument("--worker", choices=["ours", "reference", "floor"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_prepare_"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes_mb:
        folder = root / f"{size:g}mb"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        data = folder / "corpus.parquet"
        n = _write_corpus(data, size)
        floor_data = folder / "floor.parquet"
        _write_floor_input(data, floor_data)
        load = os.getloadavg()
        best = _best(data, floor_data, folder, args.num_proc, max(1, args.repeats))
        cached = _run("ours", data, folder / "cache", args.num_proc)
        floor, reference, ours = best["floor"], best["reference"], best["ours"]
        row = {
            "size_mb": size,
            "rows": n,
            "load_before": [round(x, 2) for x in load],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "floor_s": round(floor["seconds"], 2),
            "reference_s": round(reference["seconds"], 2),
            "ours_s": round(ours["seconds"], 2),
            "runs_s": {k: v["all_seconds"] for k, v in best.items()},
            "ours_over_floor": round(ours["seconds"] / floor["seconds"], 3),
            "ours_over_reference": round(ours["seconds"] / reference["seconds"], 3),
            "cpu_s": {k: round(v["cpu_s"], 2) for k, v in best.items()},
            "runs_cpu_s": {k: v["all_cpu_s"] for k, v in best.items()},
            # Each repeat's own pair (floor and ours run side by side): the spread a shared machine gives.
            "pair_ratios": _pairs(best["ours"]["all_seconds"], best["floor"]["all_seconds"]),
            "pair_ratios_cpu": _pairs(best["ours"]["all_cpu_s"], best["floor"]["all_cpu_s"]),
            "ours_load_s": best["ours"]["all_load_s"],
            "ours_over_floor_cpu": round(ours["cpu_s"] / floor["cpu_s"], 3),
            "ours_over_reference_cpu": round(ours["cpu_s"] / reference["cpu_s"], 3),
            "cached_s": round(cached["seconds"], 3),
            "peak_anon_mb": {k: round(v["peak_anon_mb"]) for k, v in best.items()},
            "peak_rss_mb": {k: round(v["peak_rss_mb"]) for k, v in best.items()},
            "ours_steps_s": ours["steps"],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"\n{'MB':>6} {'rows':>9} {'floor s':>8} {'ref s':>8} {'ours s':>8} {'ours/floor':>10} "
        f"{'ours/ref':>8} {'cached s':>9} {'anon floor/ref/ours MB':>23} {'load':>5}"
    )
    for r in rows:
        anon = "/".join(str(r["peak_anon_mb"][k]) for k in ("floor", "reference", "ours"))
        print(
            f"{r['size_mb']:>6g} {r['rows']:>9} {r['floor_s']:>8} {r['reference_s']:>8} {r['ours_s']:>8} "
            f"{r['ours_over_floor']:>10} {r['ours_over_reference']:>8} {r['cached_s']:>9} {anon:>23} "
            f"{r['load_before'][0]:>5}"
        )
    for r in rows:
        print(
            f"{r['size_mb']:g} MB, CPU seconds floor/reference/ours: "
            f"{r['cpu_s']['floor']}/{r['cpu_s']['reference']}/{r['cpu_s']['ours']} "
            f"(ours/floor {r['ours_over_floor_cpu']}, ours/reference {r['ours_over_reference_cpu']})"
        )
    for r in rows:
        wall, cpu = r["pair_ratios"], r["pair_ratios_cpu"]
        print(
            f"{r['size_mb']:g} MB, ours/floor per repeat: wall median {wall['median']} ({wall['min']}-{wall['max']}), "
            f"CPU median {cpu['median']} ({cpu['min']}-{cpu['max']}); ours' load step (s): {r['ours_load_s']}"
        )
    for r in rows:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in (r["ours_steps_s"] or {}).items())
        print(f"{r['size_mb']:g} MB, ours per step (s): {steps}")
    if args.results:
        figures = {f"{r['size_mb']:g}": r for r in rows}
        print(f"wrote {write_results('prepare', figures, command_line())}")
    if not math.isfinite(sum(r["ours_over_floor"] for r in rows)):
        sys.exit(1)


if __name__ == "__main__":
    main()

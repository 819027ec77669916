"""Peak memory of one huge document through the LM prepare (issue #21: bounded pieces in encode).

Two prepares in fresh processes, on the same small corpus of real text (the standard library's
documentation), one of them with one extra document of ``--megabytes`` MB (real text joined into
one document). The document's cost is the difference of the two peaks (``ru_maxrss``), reported
as a multiple of its size; the promise is at most 10x. Each step's own peak (over the memory held
when it started, without and with the document) shows where the rest goes: ``load`` is
``datasets.load_dataset`` (its JSON reader alone holds several times a one-line document). ``--whole`` adds the reference that was
fixed: ``tokenizers`` encoding the document in one call (about 190x before the fix).
``--format`` takes one format or both; ``--results`` writes the figures of every format run to
``benchmarks/results/long_document.json`` (keys ``<format>.<figure>``), which the docs quote.

    python benchmarks/bench_long_document.py --megabytes 30 [--format parquet jsonl] [--whole] [--results]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from figures import command_line, write_results

CHILD = """
import json, os, resource, sys, threading, time
import lightning_order.data.engine.runner as runner
from lightning_order import OrderedLMDataModule

PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6
peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
steps = {}
run_one = runner._run_one
def measured(spec, ctx, state):
    before = rss()
    peak[0] = before
    out = run_one(spec, ctx, state)
    steps[spec.name] = round(peak[0] - before)
    return out
runner._run_one = measured
data, cache = sys.argv[1], sys.argv[2]
kind = "parquet" if data.endswith(".parquet") else "json"
dm = OrderedLMDataModule(kind, data_files=data, cache_dir=cache, vocab_size=1000, block_size=128, num_proc=1)
dm.prepare_data()
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "steps": steps}))
"""

WHOLE = """
import json, resource, sys
from lightning_order.data.lm.tokenizer import train_byte_bpe
text = open(sys.argv[1]).read()
tok = train_byte_bpe([text[:2_000_000]], 1000)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
tok.encode(text)
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_mb": before}))
"""


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _measure(docs: list[str], huge: str, fmt: str, whole: bool) -> dict:
    """Both prepares (without and with the document ``huge``) from ``fmt`` files, in fresh processes."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        small, large = root / f"small.{fmt}", root / f"large.{fmt}"
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({"text": docs}), small)
            pq.write_table(pa.table({"text": [*docs, huge]}), large)
        else:
            lines = "".join(json.dumps({"text": d}) + "\n" for d in docs)
            small.write_text(lines)
            large.write_text(lines + json.dumps({"text": huge}) + "\n")
        (root / "huge.txt").write_text(huge)
        base = _child(CHILD, str(small), str(root / "a"))
        with_doc = _child(CHILD, str(large), str(root / "b"))
        cost = with_doc["peak_mb"] - base["peak_mb"]
        result = {
            "format": fmt,
            "document_mb": len(huge.encode()) / 1e6,
            "peak_without_mb": round(base["peak_mb"]),
            "peak_with_mb": round(with_doc["peak_mb"]),
            "document_cost_mb": round(cost),
            "cost_over_size": round(cost / (len(huge.encode()) / 1e6), 2),
            "step_peak_over_its_start_mb": {
                name: [base["steps"].get(name), mb] for name, mb in with_doc["steps"].items()
            },
        }
        if whole:
            one_call = _child(WHOLE, str(root / "huge.txt"))
            result["one_call_encode_cost_over_size"] = round(
                (one_call["peak_mb"] - one_call["before_mb"]) / (len(huge.encode()) / 1e6), 1
            )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=30.0)
    parser.add_argument("--whole", action="store_true", help="also encode the document in one call")
    parser.add_argument(
        "--format",
        nargs="+",
        choices=("jsonl", "parquet"),
        default=["jsonl"],
        help="the input files' format; both run one after the other",
    )
    parser.add_argument(
        "--results",
        action="store_true",
        help="write benchmarks/results/long_document.json, the figures the docs quote",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from lightning_order.data.lm.corpus import stdlib_corpus

    docs = stdlib_corpus(400)
    size = int(args.megabytes * 1e6)
    text, i = [], 0
    while sum(map(len, text)) < size:
        text.append(docs[i % len(docs)])
        i += 1
    huge = "\n\n".join(text)[:size]
    figures = {}
    for fmt in args.format:
        figures[fmt] = _measure(docs, huge, fmt, args.whole)
        print(json.dumps(figures[fmt], indent=2), flush=True)
    if args.results:
        print(f"wrote {write_results('long_document', figures, command_line())}")


if __name__ == "__main__":
    main()

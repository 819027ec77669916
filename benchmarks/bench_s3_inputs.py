"""A corpus read from an S3 server against the same corpus on local disk: bytes fetched and prepare time (#46).

Starts moto's S3 server on 127.0.0.1 (``tests/s3_server.py``), writes the standard library's
docstrings (each repeated ``--copies`` times, numbered, so no copy is a duplicate) as four JSON
lines objects and four Parquet objects, and prepares each corpus with the LM pipeline in one
process: from the local files, then from the server (the workers' ranged reads), then from the
server a second time (the same cache: a new run, as another process of the machine sees it, with
only this machine's digest records). Prints the corpus size, the bytes s3fs fetched on the first
prepare from the server (every ranged GET, counted by wrapping ``S3File._fetch_range``; of which
the read that identifies each object by its bytes) and on the second, whether the local and the
server's corpus have one cache key, and both prepare times. The local prepare runs first, so the
one from the server does not pay for the first imports.

Run: ``python benchmarks/bench_s3_inputs.py --copies 30 --results`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]

import fsspec  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import s3fs  # noqa: E402
from corpus_shapes import split_texts  # noqa: E402
from figures import command_line, write_results  # noqa: E402
from s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, make_bucket  # noqa: E402

from lightning_order import OrderedLMDataModule  # noqa: E402
from lightning_order.data.engine import input_digests  # noqa: E402

SETTINGS = {"vocab_size": 2000, "block_size": 128, "batch_size": 8, "num_proc": 1}


def _write(folder: Path, dataset: str, docs: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(4):
        part = docs[k::4]
        path = folder / f"part-{k}.{'jsonl' if dataset == 'json' else 'parquet'}"
        if dataset == "json":
            path.write_text("".join(json.dumps({"text": d}) + "\n" for d in part))
        else:
            pq.write_table(pa.table({"text": part}), path, row_group_size=2000)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=30, help="how many numbered copies of the docstrings")
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/s3_inputs.json")
    args = parser.parse_args()
    figures: dict[str, Any] = {"copies": args.copies}
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server().start()
    os.environ.update(AWS_ENDPOINT_URL=server.endpoint_url, AWS_ACCESS_KEY_ID=ACCESS_KEY,
                      AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION)  # fmt: skip
    bucket = make_bucket(server.endpoint_url)
    fetched: list[int] = []
    real = s3fs.core.S3File._fetch_range

    def counted(self: Any, start: int, end: int) -> bytes:
        data = real(self, start, end)
        fetched.append(len(data))
        return data

    s3fs.core.S3File._fetch_range = counted
    train, val = split_texts()
    docs = [f"{doc}\n(copy {i})" for i in range(args.copies) for doc in train + val]
    fs = fsspec.filesystem("s3")
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in ("json", "parquet"):
            paths = _write(Path(tmp) / dataset, dataset, docs)
            for path in paths:
                fs.put(str(path), f"{bucket}/{dataset}/{path.name}")
            start = time.perf_counter()
            local = OrderedLMDataModule(dataset, data_files=[str(p) for p in paths], cache_dir=f"{tmp}/local-{dataset}",
                                        **SETTINGS)  # fmt: skip
            local.prepare_data()
            local_s = time.perf_counter() - start
            fetched.clear()
            start = time.perf_counter()
            remote = OrderedLMDataModule(dataset, data_files=f"s3://{bucket}/{dataset}/", cache_dir=f"{tmp}/s3-{dataset}",
                                         **SETTINGS)  # fmt: skip
            identity = sum(fetched)
            remote.prepare_data()
            remote_s = time.perf_counter() - start
            first = list(fetched)
            # a second run: another process, which finds this machine's digest records, not this one's memory
            input_digests._OBJECT_DIGESTS.clear()
            fetched.clear()
            again = OrderedLMDataModule(dataset, data_files=f"s3://{bucket}/{dataset}/", cache_dir=f"{tmp}/s3-{dataset}",
                                        **SETTINGS)  # fmt: skip
            again.prepare_data()
            size = sum(p.stat().st_size for p in paths)
            figures[dataset] = {
                "corpus_mb": size / 1e6,
                "fetched_mb": sum(first) / 1e6,
                "identity_mb": identity / 1e6,
                "requests": len(first),
                "fetched_over_corpus": sum(first) / size,
                "second_fetched_mb": sum(fetched) / 1e6,
                "second_requests": len(fetched),
                "same_key": remote.cache_key == local.cache_key == again.cache_key,
                "s3_seconds": remote_s,
                "local_seconds": local_s,
                "ratio": remote_s / local_s,
            }
            print(
                f"| {dataset} | {size / 1e6:.1f} MB | {sum(first) / 1e6:.2f} MB in {len(first)} requests "
                f"({sum(first) / size:.3f}; identity {identity / 1e6:.2f} MB) | second prepare "
                f"{sum(fetched) / 1e6:.2f} MB in {len(fetched)} requests | one key: "
                f"{figures[dataset]['same_key']} | {remote_s:.1f} s | {local_s:.1f} s | {remote_s / local_s:.2f} |",
                flush=True,
            )
    server.stop()
    if args.results:
        print(write_results("s3_inputs", figures, command_line()))


if __name__ == "__main__":
    main()

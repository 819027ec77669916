"""Blocks read from a cache on an S3 server against the same cache on local disk (#46 item 3).

Starts moto's S3 server on 127.0.0.1 (``tests/s3_server.py``), writes the standard library's
docstrings (``--copies`` times, each docstring joined to another drawn at random, so no document
is a near-duplicate that dedup would remove) as a JSON lines file, and prepares the LM corpus twice in one process: into a local ``cache_dir`` and published to
``s3://<bucket>/prepared`` (the same cache key). Then, ``--repeats`` times, in alternation: one
train epoch from the local cache, one from the server by a new DataModule with an empty local shard
cache (every shard fetched: a cold epoch), and one more from the server with the shards already fetched (a warm
epoch, which must fetch nothing). Reports, per epoch kind, the median time and blocks per second,
the throughput of each against the local cache's (a ratio, measured in the same run), and the
bytes fetched over the bytes served in a cold epoch (``shard_cache.fetched_bytes``).

Run: ``python benchmarks/bench_s3_cache.py --copies 40 --repeats 7 --results`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]

from corpus_shapes import split_texts  # noqa: E402
from figures import command_line, write_results  # noqa: E402
from s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, make_bucket  # noqa: E402

from lightning_order import OrderedLMDataModule  # noqa: E402
from lightning_order.data.engine import shard_cache  # noqa: E402

SETTINGS = {"vocab_size": 2000, "block_size": 128, "batch_size": 16, "num_proc": 1}


def _epoch(dm: OrderedLMDataModule, epoch: int) -> tuple[float, int, int]:
    """``(seconds, blocks, bytes served)`` of one train epoch read in this process."""
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(epoch)
    start = time.perf_counter()
    blocks = sum(int(batch["input_ids"].shape[0]) for batch in loader)
    seconds = time.perf_counter() - start
    return seconds, blocks, blocks * (SETTINGS["block_size"] + 1) * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=20, help="how many numbered copies of the docstrings")
    parser.add_argument("--repeats", type=int, default=5, help="epochs of each kind, in alternation")
    parser.add_argument("--results", action="store_true", help="write benchmarks/results/s3_cache.json")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server().start()
    os.environ.update(AWS_ENDPOINT_URL=server.endpoint_url, AWS_ACCESS_KEY_ID=ACCESS_KEY,
                      AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_REGION=REGION)  # fmt: skip
    train, val = split_texts()
    # Distinct documents (a numbered copy would be a near-duplicate that dedup removes): each copy
    # pairs every docstring with another drawn at random, seeded.
    texts = train + val
    docs = [
        f"{doc}\n\n{other}"
        for k in range(args.copies)
        for doc, other in zip(texts, random.Random(k).sample(texts, len(texts)))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["LIGHTNING_ORDER_CACHE"] = str(root / "user-cache")
        corpus = root / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        common: dict[str, Any] = {"dataset": "json", "data_files": str(corpus), **SETTINGS}
        url = f"s3://{make_bucket(server.endpoint_url)}/prepared"
        local = OrderedLMDataModule(cache_dir=str(root / "local"), **common)
        publisher = OrderedLMDataModule(cache_dir=url, **common)
        assert local.cache_key == publisher.cache_key
        local.prepare_data()
        local.setup("fit")
        publisher.prepare_data()
        shards = root / "user-cache" / "shards"
        times: dict[str, list[float]] = {"local": [], "cold": [], "warm": []}
        ratios: list[float] = []
        warm_fetched = 0
        blocks = 0
        for repeat in range(args.repeats):
            seconds, blocks, _ = _epoch(local, repeat)
            times["local"].append(seconds)
            shutil.rmtree(shards, ignore_errors=True)  # every shard fetched again, by a new reader
            remote = OrderedLMDataModule(cache_dir=url, **common)
            remote.setup("fit")
            before = shard_cache.fetched_bytes()
            seconds, _, served = _epoch(remote, repeat)
            ratios.append((shard_cache.fetched_bytes() - before) / served)
            times["cold"].append(seconds)
            before = shard_cache.fetched_bytes()
            seconds, _, _ = _epoch(remote, repeat)
            warm_fetched += shard_cache.fetched_bytes() - before
            times["warm"].append(seconds)
    server.stop()
    median = {kind: statistics.median(values) for kind, values in times.items()}
    figures = {
        "documents": len(docs),
        "train_blocks": blocks,
        "repeats": args.repeats,
        "seconds": median,
        "blocks_per_s": {kind: blocks / value for kind, value in median.items()},
        "throughput_vs_local": {kind: median["local"] / median[kind] for kind in ("cold", "warm")},
        "fetched_over_served_cold": statistics.median(ratios),
        "warm_fetched_bytes": warm_fetched,
    }
    print(json.dumps(figures, indent=2))
    if args.results:
        print(write_results("s3_cache", figures, command_line()))


if __name__ == "__main__":
    main()
